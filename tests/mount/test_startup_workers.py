"""The startup scan's probe workers, started before the daemon's imports and mount, are gone
once the mount serves: a serving daemon of plain steps has no child process."""

from __future__ import annotations

from tests.helpers.harness import mount_sandfs
from tests.helpers.processes import children_of


def test_no_probe_worker_outlives_the_startup_scan(tmp_path, config_path):
    with mount_sandfs(tmp_path, [config_path]) as mounted:
        assert (mounted.path("t0", "0", "0", "view")).stat().st_size > 0
        assert children_of(mounted.process.pid) == set()


def test_a_rescan_from_the_index_stops_the_unused_workers(tmp_path, config_path):
    """The second mount finds every video in the scan index: the workers started ahead
    probe nothing and must not stay."""
    with mount_sandfs(tmp_path, [config_path]) as mounted:
        assert ", 0 probed" not in mounted.log_text()
    with mount_sandfs(tmp_path, [config_path]) as mounted:
        assert ", 0 probed" in mounted.log_text()  # all from the index
        assert children_of(mounted.process.pid) == set()
