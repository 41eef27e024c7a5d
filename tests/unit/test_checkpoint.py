"""The plan checkpoint applies only to the configs it was written for: a window frozen for a
task that was edited since is planned again (as with a fresh cache dir), loudly."""

from __future__ import annotations

import logging

from sandfs.config.loader import load_task_config
from sandfs.plan.checkpoint import load_plan_state, save_plan_state
from sandfs.plan.coordination import Coordination
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import FAKE_DATASET, fake_videos

EDITED = {"frames_per_video": 2, "frame_stride": 3}


def config(tmp_path, name: str, **overrides):
    path = write_config(tmp_path / f"{name}.yaml",
                        task_config(FAKE_DATASET, task=name, **overrides))
    return load_task_config(path, check_paths=False)


def views(configs, state: dict | None = None) -> dict:
    """Every task's views of epochs 0-3 (windows 0 and 1), planned together."""
    coordination = Coordination(configs)
    if state is not None:
        coordination.load(state)
    videos = fake_videos(10)
    plans = [TaskPlan(c, videos, k_epochs=2, coordination=coordination) for c in configs]
    return {(p.name, e): p.view_plan(e, 0) for p in plans for e in range(4)}, coordination


def test_an_edited_task_plans_as_with_a_fresh_cache_dir(tmp_path, caplog):
    a, b = config(tmp_path, "a"), config(tmp_path, "b", seed=3)
    _, first = views([a, b])
    save_plan_state(str(tmp_path), first.state())
    b_edited = config(tmp_path, "b", seed=3, sampling=EDITED)
    fresh, _ = views([a, b_edited])
    with caplog.at_level(logging.WARNING):
        restarted, _ = views([a, b_edited], load_plan_state(str(tmp_path)))
    assert restarted == fresh
    assert "another config of task b" in caplog.text


def test_an_unedited_restart_keeps_the_windows_even_with_a_task_gone(tmp_path, caplog):
    a, b = config(tmp_path, "a"), config(tmp_path, "b", seed=3, sampling=EDITED)
    together, first = views([a, b])
    save_plan_state(str(tmp_path), first.state())
    with caplog.at_level(logging.WARNING):
        again, _ = views([a], load_plan_state(str(tmp_path)))
    assert again == {key: view for key, view in together.items() if key[0] == "a"}
    assert views([a])[0] != again  # planned alone, the pool would differ
    assert "plan checkpoint" not in caplog.text


def test_an_epoch_offset_applies_only_to_the_config_that_joined(tmp_path, caplog):
    leader, joined = config(tmp_path, "leader", epochs=6), config(tmp_path, "joined", seed=7)
    coordination = Coordination([leader])
    coordination.join(joined, 3)
    state = coordination.state()
    same = Coordination([leader])
    same.load(state)
    same.join(joined, 0)
    assert same.epoch_offset("joined") == 3
    edited = Coordination([leader])
    edited.load(state)
    with caplog.at_level(logging.WARNING):
        edited.join(config(tmp_path, "joined", seed=8), 0)
    assert edited.epoch_offset("joined") == 0
    assert "task joined was edited" in caplog.text


def test_windows_no_task_left_can_read_are_forgotten(tmp_path):
    """M1: a task that jumped far ahead froze a window at each jump; once it ended, the windows
    no task on the dataset can read are forgotten, and those another one may read keep what
    they froze (its views read the same bytes)."""
    short, far = config(tmp_path, "short", epochs=4), config(tmp_path, "far", seed=3, epochs=60)
    coordination = Coordination([short, far])
    videos = fake_videos(10)
    plans = [TaskPlan(c, videos, k_epochs=2, coordination=coordination) for c in (short, far)]
    before = plans[0].view_plan(3, 0)
    for epoch in range(0, 60, 3):
        plans[1].view_plan(epoch, 0)

    def windows() -> set[int]:
        return {entry["window"] for entry in coordination.state()["windows"]}

    assert len(windows()) == 20
    assert coordination.forget_unreached(2) == 0  # `far` may read every one of them
    coordination.remove("far")
    assert coordination.forget_unreached(2) == 18 and coordination.changed
    assert windows() == {0, 1} and plans[0].view_plan(3, 0) == before
