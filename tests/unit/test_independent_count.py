"""`frames_decoded_independent`, counted in the event loop as each batch completes: the frames
each clip's own loader would decode, without drawing the clip's frames again where it carries
them (a path with no temporal op)."""

from __future__ import annotations

import pytest

from sandfs.materialize import Materializer
from sandfs.media.gop import frames_to_decode
from sandfs.plan.task import TaskPlan
from sandfs.stats import Stats
from tests.helpers.plans import make_plan

STATIC = [  # no branch drawn, no temporal op: a clip carries the frames decoded for it
    {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
     "config": [{"resize": {"shape": [36, 48]}}]},
    {"name": "crop", "branch_type": "single", "inputs": ["r"], "outputs": ["out"],
     "config": [{"random_crop": {"size": [32, 32]}}]},
]
# a drawn branch: the path is walked clip by clip (no StaticPath), but no op on it is temporal
BRANCHED = [*STATIC[:1], {"name": "maybe_flip", "branch_type": "random", "inputs": ["r"],
                          "outputs": ["out"], "branches": [
                              {"prob": 0.5, "config": [{"flip": {"direction": "horizontal"}}]},
                              {"prob": 0.5, "config": []}]}]
TEMPORAL = [*STATIC[:1], {"name": "reverse", "branch_type": "single", "inputs": ["r"],
                          "outputs": ["out"], "config": [{"inv_sample": True}]}]


def expected(plan: TaskPlan, epoch: int, iteration: int) -> int:
    """Decoding each (video, sample) of the batch alone, from the plan's clip frames."""
    view = plan.view_plan(epoch, iteration)
    clips = {(c.video_index, c.sample) for c in view.clips}
    return sum(frames_to_decode(plan.videos[v], sorted(set(plan.clip_frames(epoch, v, s))))
               for v, s in clips)


def counted(plan: TaskPlan, epoch: int, iteration: int, readers: int = 1) -> int:
    stats = Stats()
    Materializer(stats).count_independent(plan, plan.view_plan(epoch, iteration), readers)
    return stats.get("frames_decoded_independent")


@pytest.mark.parametrize("augmentation", [STATIC, BRANCHED], ids=["static", "branched"])
def test_a_path_without_temporal_ops_counts_its_clips_frames_without_drawing_them_again(
        tmp_path, monkeypatch, augmentation):
    plan = make_plan(tmp_path, augmentation=augmentation,
                     sampling={"frames_per_video": 8, "samples_per_video": 2})
    assert all((path is not None) == (augmentation is STATIC) for path in plan.static_paths)
    wanted = {(e, i): expected(plan, e, i) for e in range(2) for i in range(2)}
    views = {key: plan.view_plan(*key) for key in wanted}  # resolved before the patch

    def drawn_again(*args, **kwargs):
        raise AssertionError("the clip frames of a path without temporal ops drawn again")

    monkeypatch.setattr(plan, "clip_frames", drawn_again)
    monkeypatch.setattr(plan, "view_plan", lambda e, i: views[e, i])
    for (epoch, iteration), frames in wanted.items():
        assert frames > 0
        assert counted(plan, epoch, iteration) == frames


def test_a_temporal_op_counts_the_frames_before_it(tmp_path):
    plan = make_plan(tmp_path, augmentation=TEMPORAL, sampling={"frames_per_video": 8})
    assert all(path is None for path in plan.static_paths)
    for epoch, iteration in [(0, 0), (1, 2)]:
        assert counted(plan, epoch, iteration) == expected(plan, epoch, iteration)


@pytest.mark.parametrize("readers", [1, 4])
def test_each_reader_counts_as_loading_alone(tmp_path, readers):
    plan = make_plan(tmp_path, augmentation=STATIC)
    assert counted(plan, 0, 0, readers) == readers * expected(plan, 0, 0)
