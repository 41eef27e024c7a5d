"""A task joining a cold mount whose window 0 is planned in parts (docs/design.md#planning-ahead),
through a real mount: it gets its own lead part and parts, so its first batches are made by
the window's jobs while the window is still in parts (not made on demand, nor after the rest
of the window planned at once), and its views equal those of the task joining the same frozen
window once whole (docs/contract.md#determinism: a joining task reads what the window froze)."""

from __future__ import annotations

import shutil
import time

import pytest
import yaml

from tests.helpers.harness import (
    Mounted,
    forgiving_teardown,
    require_fuse,
    start_daemon,
    status_of,
    strict_teardown,
    task_config,
    wait_mounted,
    write_config,
)
from tests.mount.test_cold_mount import linked_dataset  # noqa: F401 (a fixture)

READ = (0, 1, 7)  # its lead part's batches (4), then past them: a part of its own


def joined_config(dataset) -> dict:
    config = task_config(dataset, task="t1", seed=11, epochs=2)
    config["dataset"]["extensions"] = [".mkv"]
    return config


@pytest.mark.slow  # three mounts of 3,000 videos: ~18 s
def test_a_task_joining_while_window_0_is_in_parts_gets_parts_of_its_own(
        tmp_path, linked_dataset):  # noqa: F811
    require_fuse()
    config = task_config(linked_dataset, epochs=2)  # 3,000 videos: 6,000 clips a window
    config["dataset"]["extensions"] = [".mkv"]
    # probes only for what planning waits for, and the background worker held 10 s: the
    # window's parts wait for their probes, so it stays in parts while t1 joins and reads
    config["engine"]["scan"] = {"ahead_videos": 0}
    config["engine"]["plan_ahead"] = 1
    config = write_config(tmp_path / "t0.yaml", config)
    mountpoint, log, cache = tmp_path / "mnt", tmp_path / "cold.log", tmp_path / "cache"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [config], cache, log,
                           env={"SANDFS_FAULT": "background_scan:1:sleep"})
    try:
        wait_mounted(mountpoint, process, log)
        (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        status = status_of(mountpoint)
        assert status["scheduler"]["windows_in_parts"] == [0]
        recomputed = status["views_recomputed"]
        joined = join_and_read(mountpoint, linked_dataset)
        status = status_of(mountpoint)
        assert status["scheduler"]["windows_in_parts"] == [0], status["scan"]
        assert status["views_recomputed"] == recomputed  # made by the window's jobs
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)
    # window 0 as frozen (the plan state kept) and whole before t1 joins: the same bytes
    (tmp_path / "whole").mkdir()
    for kept in [*cache.glob("scan-*.json"), cache / "plan-state.json"]:
        shutil.copy(kept, tmp_path / "whole")
    log = tmp_path / "whole.log"
    process = start_daemon(mountpoint, [config], tmp_path / "whole", log)
    try:
        wait_mounted(mountpoint, process, log)
        (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        give_up = time.monotonic() + 30
        while status_of(mountpoint)["scheduler"]["windows_in_parts"]:
            assert time.monotonic() < give_up, "window 0 never whole"
            time.sleep(0.1)
        assert joined == join_and_read(mountpoint, linked_dataset)
        strict_teardown(Mounted(mountpoint, process, log, tmp_path / "whole"))
    finally:
        forgiving_teardown(mountpoint, process)


def join_and_read(mountpoint, dataset) -> list[bytes]:
    """t1 registered through `.sand/tasks/`, and the READ batches of its epoch 0."""
    (mountpoint / ".sand" / "tasks" / "t1.yaml").write_text(
        yaml.safe_dump(joined_config(dataset), sort_keys=False))
    return [(mountpoint / "t1" / "0" / str(i) / "view").read_bytes() for i in READ]
