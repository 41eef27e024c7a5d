"""The scan tells how far it is: a mount of a dataset prints `scan: N/N videos` (on a terminal
the line is rewritten in place; into a log, one line every 10 s and the last one)."""

from __future__ import annotations

from tests.helpers.harness import mount_sandfs


def test_the_mount_logs_the_scans_progress(tmp_path, config_path):
    with mount_sandfs(tmp_path, [config_path]) as mounted:
        lines = [line for line in mounted.log_text().splitlines() if line.startswith("scan: ")]
    assert lines, "no scan progress in the daemon's log"
    assert lines[-1].startswith("scan: 12/12 videos (100.0 %)")
