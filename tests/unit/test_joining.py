"""Where a task joining a live mount starts: at the epoch of the leading task on the same
dataset, the same meaning its identity (tag and videos), not its path: the same folder tagged
`val` is another dataset (no shared pools: it starts at 0), a copy of the videos elsewhere is
the same one (it shares the pools being drawn now)."""

from __future__ import annotations

from dataclasses import replace

from sandfs.plan.identity import dataset_identity
from sandfs.sched.windows import Position
from sandfs.tasks import TaskRegistry
from tests.helpers.plans import fake_videos, make_plan


def at_epoch_2(name: str) -> Position:
    return Position(2, 0)


def joining_epoch(registry: TaskRegistry, cfg, videos) -> int:
    """The offset `plan_new_task` gives the joining task (its identity looked up)."""
    leaders = registry.leading_epochs(cfg, at_epoch_2)
    return leaders.get(dataset_identity(cfg.dataset.tag, videos).key, 0)


def test_the_same_folder_under_another_tag_is_another_dataset(tmp_path):
    videos = fake_videos(12)
    registry = TaskRegistry([make_plan(tmp_path, videos=videos, epochs=5)])
    same = make_plan(tmp_path, videos=videos, task="late", epochs=5).cfg
    val = replace(same, dataset=replace(same.dataset, tag="val"))
    assert val.dataset.video_dataset_path == same.dataset.video_dataset_path
    assert joining_epoch(registry, same, videos) == 2
    assert joining_epoch(registry, val, videos) == 0


def test_a_copy_of_the_videos_elsewhere_is_the_same_dataset(tmp_path):
    videos = fake_videos(12)
    registry = TaskRegistry([make_plan(tmp_path, videos=videos, epochs=5)])
    cfg = make_plan(tmp_path, videos=videos, task="late", epochs=5).cfg
    moved = replace(cfg, dataset=replace(cfg.dataset, video_dataset_path="/elsewhere/copy"))
    assert joining_epoch(registry, moved, videos) == 2
    assert joining_epoch(registry, cfg, fake_videos(11)) == 0  # other videos: another one


def test_a_task_removed_while_its_window_is_planned_freezes_nothing(tmp_path):
    """A window planned in a thread for a task removed meanwhile (C4): its pool is its own,
    frozen for no one, instead of `max()` of no task at all."""
    plan = make_plan(tmp_path, epochs=5)
    plan.coordination.remove(plan.name)
    view = plan.view_plan(4, 0)  # window 2: never frozen
    assert view.clips
    assert plan.coordination.state()["windows"] == []
