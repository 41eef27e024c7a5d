"""One task's failure stays in that task: a fault fired at each stage of one task's work
(planning, admission, job start, decode, augmentation, assembly, serving) fails some of that
task's views — EIO, the reason in status.json and in the log — while the other task reads
every view of 3 epochs, byte for byte as the reference, from a daemon that stays up."""

from __future__ import annotations

import contextlib
import errno
import json
import re
import shutil
from functools import cache
from pathlib import Path

import pytest

from sandfs.faults import STAGES
from tests.helpers.churn import ViewReader
from tests.helpers.harness import (
    LOG_ERROR,
    forgiving_teardown,
    mount_sandfs,
    require_fuse,
    start_daemon,
    task_config,
    wait_mounted,
    write_config,
)
from tests.helpers.mountwatch import is_mounted
from tests.helpers.plans import build_plans
from tests.helpers.reference import reference_view

# what each stage raises: a bug, a MemoryError (the view allocation of issue 35), an OSError
ACTIONS = {"planning": "raise", "admission": "memory", "job_start": "memory",
           "decode": "enospc", "augment": "raise", "assembly": "raise",
           "serving_read": "raise"}
# at every read: the kernel reads a failed page again, and a fault fired once goes unseen
EVERY_TIME = {"serving_read"}


@cache
def references(healthy: Path, victim: Path) -> dict[str, dict[tuple[int, int], bytes]]:
    plans = build_plans([healthy, victim])
    return {name: {(e, i): reference_view(plan, e, i) for e in range(plan.epochs)
                   for i in range(plan.iterations_per_epoch)}
            for name, plan in plans.items()}


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory, dataset_dir) -> tuple[Path, Path]:
    """`healthy` and `victim`, each on its own copy of the videos (their jobs are their own)."""
    root = tmp_path_factory.mktemp("boundary")
    copy = root / "victim-videos"
    shutil.copytree(dataset_dir, copy)
    healthy = write_config(root / "healthy.yaml", task_config(dataset_dir, task="healthy"))
    victim = task_config(copy, task="victim", seed=3)
    victim["dataset"]["tag"] = "victim"
    return healthy, write_config(root / "victim.yaml", victim)


@pytest.fixture(scope="module")
def sharing_tasks(tmp_path_factory, dataset_dir) -> tuple[Path, Path]:
    """`healthy` and `victim` on the same videos: their decode passes are shared."""
    root = tmp_path_factory.mktemp("sharing")
    healthy = write_config(root / "healthy.yaml", task_config(dataset_dir, task="healthy"))
    victim = write_config(root / "victim.yaml", task_config(dataset_dir, task="victim", seed=3))
    return healthy, victim


def read_views(m, task: str, keys) -> tuple[dict, dict]:
    """(bytes of each view read, errno of each that failed)."""
    read, failed = {}, {}
    for epoch, iteration in keys:
        try:
            read[epoch, iteration] = m.path(task, str(epoch), str(iteration), "view").read_bytes()
        except OSError as exc:
            failed[epoch, iteration] = exc.errno
    return read, failed


@pytest.mark.parametrize("stage", STAGES)
def test_a_fault_in_one_tasks_work_fails_that_task_alone(tmp_path, two_tasks, stage):
    check_one_task_fails(tmp_path, two_tasks, stage, "*" if stage in EVERY_TIME else "1")


# a decode pass and its admission serve every task reading the video: a failure there fails
# the pass's batches, whoever reads them (docs/contract.md#7-errors); the other stages fail the
# task's own batches or clips even in a pass shared with another task
PER_TASK_IN_A_SHARED_PASS = [s for s in STAGES if s not in ("decode", "admission")]


@pytest.mark.parametrize("stage", PER_TASK_IN_A_SHARED_PASS)
def test_a_fault_every_time_fails_one_task_of_a_shared_pass(tmp_path, sharing_tasks, stage):
    check_one_task_fails(tmp_path, sharing_tasks, stage, "*")


def check_one_task_fails(tmp_path, tasks: tuple[Path, Path], stage: str, nth: str) -> None:
    refs = references(*tasks)
    fault = f"{stage}:{nth}:{ACTIONS[stage]}:victim"
    with mount_sandfs(tmp_path, list(tasks), env={"SANDFS_FAULT": fault}) as m:
        victim_read, victim_failed = read_views(m, "victim", refs["victim"])
        healthy_read, healthy_failed = read_views(m, "healthy", refs["healthy"])
        status = json.loads(m.path(".sand", "status.json").read_bytes())
        assert m.process.poll() is None, m.log_text()[-3000:]
        assert healthy_failed == {}
        assert healthy_read == refs["healthy"]  # every view of 3 epochs, exact
        assert victim_failed and set(victim_failed.values()) == {errno.EIO}
        for key, data in victim_read.items():  # its other views are exact
            assert data == refs["victim"][key], key
        reason = f"{stage} for task victim"  # what each action's message names
        reported = json.dumps([f for f in status["failures"] if f["task"] == "victim"]
                              + [status["tasks"]["victim"]])
        assert reason in reported, status
        assert "healthy" not in json.dumps(status["failures"])
        log = m.log_text()
        assert reason in log
        failed_lines = re.findall(r" ERROR .*(?:job for|view) (.*) failed", log)
        assert len(failed_lines) == len(set(failed_lines)), failed_lines  # each once
        assert "healthy" not in "".join(re.findall(r".* (?:ERROR|WARNING) .*", log))
        m.expected_log_errors = sum(1 for line in log.splitlines() if LOG_ERROR.search(line))


def test_a_broken_scheduler_ends_the_mount_cleanly(tmp_path, two_tasks):
    """The scheduler's own loop raising (its state broken, no task to blame): the daemon logs
    why, unmounts, exits 1, and the reader gets an error instead of waiting for ever."""
    require_fuse()
    mountpoint, log_path = tmp_path / "mnt", tmp_path / "mnt.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, list(two_tasks), tmp_path / "cache", log_path,
                           env={"SANDFS_FAULT": "scheduler:10:raise"})
    try:
        with contextlib.suppress(RuntimeError):  # ended before it served: no reader then
            wait_mounted(mountpoint, process, log_path)
        reader = ViewReader(mountpoint, "healthy", iterations=3, epochs=3).start()
        code = process.wait(timeout=60)
        assert reader.stop(), "a read hung on the ended mount"
        log = log_path.read_text()
        assert code == 1, log[-3000:]
        assert ("CRITICAL sandfs.daemon: the scheduler failed: RuntimeError: injected fault at "
                "scheduler; unmounting") in log
        assert "sandfs: the scheduler failed (RuntimeError: injected fault at scheduler)" in log
        assert not is_mounted(mountpoint)
        assert reader.errors  # ENOTCONN or ENOENT: the mount ended under it (or before)
    finally:
        forgiving_teardown(mountpoint, process)
