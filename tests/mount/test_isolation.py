"""One task never takes down the others: a branch condition that passes validation but fails
at run time (`iteration % (epoch - 3)` at epoch 3) fails exactly the views that need it (EIO,
the reason in status.json); the task's other views, the other tasks and the daemon go on."""

from __future__ import annotations

import errno
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.harness import mount_sandfs, run_cli, task_config, write_config
from tests.helpers.plans import build_plans
from tests.helpers.reference import reference_view

BAD_EPOCH = 3
REASON = (f"task bad step late_reverse: condition 'iteration % (epoch - 3) == 0' at epoch "
          f"{BAD_EPOCH} iteration 0: integer division by zero")


def bad_config(dataset_dir) -> dict:
    """Epoch 3 divides by zero; every other epoch is fine."""
    cfg = task_config(dataset_dir, task="bad", seed=4, epochs=5)
    cfg["dataset"]["augmentation"].append(
        {"name": "late_reverse", "branch_type": "conditional", "inputs": ["cropped"],
         "outputs": ["ordered"],
         "branches": [{"condition": "iteration % (epoch - 3) == 0",
                       "config": [{"inv_sample": True}]},
                      {"condition": "else", "config": None}]})
    return cfg


def status(m) -> dict:
    return json.loads(m.path(".sand", "status.json").read_bytes())


def check_served(m, plans, *, exact: bool = True) -> None:
    """The bad task's epoch-3 views give EIO, every other view of every task is served (equal
    to the reference when `exact`, else of the planned size)."""
    for name, plan in plans.items():
        for epoch in range(plan.epochs):
            for iteration in range(plan.iterations_per_epoch):
                view = m.path(name, str(epoch), str(iteration), "view")
                if name == "bad" and epoch == BAD_EPOCH:
                    with pytest.raises(OSError) as failed:
                        view.read_bytes()
                    assert failed.value.errno == errno.EIO
                elif exact:
                    assert view.read_bytes() == reference_view(plan, epoch, iteration), view
                else:
                    assert len(view.read_bytes()) == plan.view_nbytes(epoch, iteration), view


def check_status(m, plans) -> None:
    figures = status(m)["tasks"]
    bad = plans["bad"]
    assert figures["bad"]["failed_views"] == bad.iterations_per_epoch
    assert figures["bad"]["view_error"] == REASON
    assert figures["good"]["failed_views"] == 0 and figures["good"]["view_error"] is None


def test_a_failing_condition_fails_only_its_views(tmp_path, dataset_dir):
    paths = [write_config(tmp_path / "good.yaml", task_config(dataset_dir, task="good",
                                                              epochs=5)),
             write_config(tmp_path / "bad.yaml", bad_config(dataset_dir))]
    plans = build_plans(paths)
    with mount_sandfs(tmp_path, paths) as m:
        check_served(m, plans)
        view = m.path("bad", str(BAD_EPOCH), "0", "view")
        assert view.stat().st_size == plans["bad"].view_nbytes(BAD_EPOCH, 0)
        with pytest.raises(OSError) as failed:
            os.getxattr(view, "user.sand.meta")
        assert failed.value.errno == errno.EIO
        assert json.loads(os.getxattr(m.path("bad", "2", "0", "view"), "user.sand.meta"))
        check_status(m, plans)
        m.expected_log_errors = plans["bad"].iterations_per_epoch  # one line per failed view
    assert "Traceback" not in m.log_text()


def test_a_task_added_live_with_a_failing_condition_fails_only_its_views(tmp_path,
                                                                        dataset_dir):
    good = write_config(tmp_path / "good.yaml", task_config(dataset_dir, task="good", epochs=5))
    bad = write_config(tmp_path / "bad.yaml", bad_config(dataset_dir))
    with mount_sandfs(tmp_path, [good]) as m:
        done = run_cli("task", "add", str(m.mountpoint), str(bad))
        assert done.returncode == 0, done.stderr
        plans = build_plans([good, bad])  # shapes and counts: it joined windows planned before
        check_served(m, plans, exact=False)
        check_status(m, plans)
        m.expected_log_errors = plans["bad"].iterations_per_epoch


def test_listing_a_long_task_leaves_another_tasks_reads_going(tmp_path, dataset_dir):
    """`ls` of a task with 100,000 epochs completes while another task is read: each page of
    the listing is made on its own, so the reads between pages are served."""
    paths = [write_config(tmp_path / "good.yaml", task_config(dataset_dir, task="good")),
             write_config(tmp_path / "long.yaml",
                          task_config(dataset_dir, task="long", seed=2, epochs=100_000))]
    plans = build_plans(paths)
    good = plans["good"]
    with mount_sandfs(tmp_path, paths) as m, ThreadPoolExecutor(1) as pool:
        listing = pool.submit(os.listdir, m.path("long"))
        slowest = 0.0
        while not listing.done():
            for epoch in range(good.epochs):
                started = time.monotonic()
                data = m.path("good", str(epoch), "0", "view").read_bytes()
                slowest = max(slowest, time.monotonic() - started)
                assert data == reference_view(good, epoch, 0)
        names = listing.result(timeout=120)
        assert len(names) == 100_001 and names[:2] == ["videos", "0"] and "99999" in names
        assert slowest < 30, f"a read of another task waited {slowest:.1f} s"
