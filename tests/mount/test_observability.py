"""Watching a real mount: .sand/metrics parsed by Prometheus' own parser agrees with
status.json after views were read, and `sandfs status --watch` draws the task's row."""

from __future__ import annotations

import json

from tests.helpers.harness import run_cli
from tests.helpers.metrics import assert_between, parse_metrics


def read_views(mounted, count: int) -> None:
    for iteration in range(count):
        assert mounted.path("t0", "0", str(iteration), "view").read_bytes()


def test_metrics_agree_with_status_json(mounted):
    read_views(mounted, 3)
    before = json.loads(mounted.path(".sand", "status.json").read_bytes())
    text = mounted.path(".sand", "metrics").read_text()
    after = json.loads(mounted.path(".sand", "status.json").read_bytes())
    samples = parse_metrics(text)
    assert_between(samples, before, after)
    assert samples[("sandfs_views_served_total", (("task", "t0"),))] == 3
    assert samples[("sandfs_frames_decoded_total", ())] > 0
    assert "metrics" in {p.name for p in mounted.path(".sand").iterdir()}


def test_status_watch_draws_the_task(mounted):
    read_views(mounted, 2)
    done = run_cli("status", str(mounted.mountpoint), "--watch", "--iterations", "2",
                   "--interval", "0.2", timeout=60)
    assert done.returncode == 0, done.stderr
    task = json.loads(mounted.path(".sand", "status.json").read_bytes())["tasks"]["t0"]
    row = next(line for line in done.stdout.splitlines() if " t0 " in line)
    cells = [cell.strip() for cell in row.split("│")]
    assert cells[1:4] == ["t0", f"{task['epoch']}/{task['epochs']}",
                          f"{task['iteration']}/{task['iterations_per_epoch']}"]
    assert cells[5] == "2"  # views served (ready ahead moves while the scheduler works)
    assert "decode amplification" in done.stdout and done.stderr == ""
