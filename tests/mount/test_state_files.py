"""State kept in the cache dir between runs never outlives what it was written for: the plan
checkpoint applies only to unchanged task configs, and a damaged state file is found by its
checksum, discarded, rebuilt and counted."""

from __future__ import annotations

import json
import os

from tests.helpers.harness import mount_sandfs, task_config, write_config


def every_view(m, tasks=("a", "b"), epochs: int = 3) -> dict:
    return {(task, epoch, iteration): m.path(task, str(epoch), str(iteration),
                                             "view").read_bytes()
            for task in tasks for epoch in range(epochs) for iteration in range(2)}


def configs(tmp_path, dataset_dir, **b_overrides):
    return [write_config(tmp_path / "a.yaml", task_config(dataset_dir, task="a")),
            write_config(tmp_path / "b.yaml",
                         task_config(dataset_dir, task="b", seed=3, **b_overrides))]


def test_an_edited_task_remounted_on_its_cache_dir_gives_the_fresh_views(tmp_path,
                                                                        dataset_dir):
    with mount_sandfs(tmp_path, configs(tmp_path, dataset_dir)) as m:
        before = every_view(m)
    edited = configs(tmp_path, dataset_dir, sampling={"frames_per_video": 3, "frame_stride": 3})
    with mount_sandfs(tmp_path, edited) as m:
        again = every_view(m)
        log = m.log_text()
    with mount_sandfs(tmp_path, edited, name="fresh") as m:
        fresh = every_view(m)
    assert again == fresh
    assert again != before
    assert "another config of task b" in log


def status(m) -> dict:
    return json.loads(m.path(".sand", "status.json").read_bytes())


def flip_digit(path, after: bytes) -> None:
    """Change the digit after `after`: the JSON stays valid, only the checksum tells."""
    raw = path.read_bytes()
    at = raw.index(after) + len(after)
    digit = b"1" if raw[at:at + 1] != b"1" else b"2"
    path.write_bytes(raw[:at] + digit + raw[at + 1:])


def test_damaged_state_files_are_discarded_rebuilt_and_counted(tmp_path, dataset_dir):
    """A flipped byte in the plan checkpoint or the scan index is found by its checksum: the
    mount serves what an undamaged restart serves and says so in status.json."""
    paths = configs(tmp_path, dataset_dir)
    with mount_sandfs(tmp_path, paths) as m:
        before = every_view(m)
        metas = m.path("a", "0", "0", "view")
        meta = json.loads(os.getxattr(metas, "user.sand.meta"))
        assert status(m)["state_files_rebuilt"] == 0
    cache = tmp_path / "mnt-cache"
    flip_digit(cache / "plan-state.json", b'"pool_key":"')
    (index,) = cache.glob("scan-*.json")
    flip_digit(index, b'"[')  # a width: sound JSON, sound entry; only the checksum tells
    with mount_sandfs(tmp_path, paths) as m:
        assert status(m)["state_files_rebuilt"] == 2
        assert json.loads(os.getxattr(metas, "user.sand.meta")) == meta
        assert every_view(m) == before
        log = m.log_text()
    assert log.count("is damaged (checksum mismatch)") == 2
    with mount_sandfs(tmp_path, paths) as m:  # both were rebuilt
        assert status(m)["state_files_rebuilt"] == 0
        assert every_view(m) == before
