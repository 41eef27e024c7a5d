"""State kept in the cache dir between runs never outlives what it was written for: the plan
checkpoint applies only to unchanged task configs, and a damaged state file is found by its
checksum, discarded, rebuilt and counted."""

from __future__ import annotations

import json

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
