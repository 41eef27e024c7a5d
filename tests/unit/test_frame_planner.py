"""aug{D} planning on its own: planning only the view that holds a video gives exactly what
planning the whole epoch gave, failed views are recorded, and what is kept stays bounded."""

from __future__ import annotations

import pytest
import trio

from sandfs.config.condition import ConditionError
from sandfs.plan.frames import iterations_of
from sandfs.sched import frameplanner
from sandfs.sched.frameplanner import FramePlanner
from tests.helpers.plans import fake_videos, make_plan

RESIZE = {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
          "config": [{"resize": {"shape": [32, 32]}}]}
FAILS_AT_ITERATION_1 = [RESIZE, {  # 1 // 0 at iteration 1: that view cannot be planned
    "name": "odd", "branch_type": "conditional", "inputs": ["r"], "outputs": ["out"],
    "branches": [{"condition": "1 // (iteration - 1) >= 0", "config": [{"inv_sample": True}]},
                 {"condition": "else", "config": []}]}]


def whole_epoch_uses(plan, epoch: int) -> dict:
    """The oracle: every view of the epoch planned, (video, frame) -> the first clip using it."""
    uses = {}
    for iteration in range(plan.iterations_per_epoch):
        try:
            view = plan.view_plan(epoch, iteration)
        except ConditionError:
            continue
        for clip in view.clips:
            for index in clip.frame_indices:
                uses.setdefault((clip.video_index, index), clip)
    return uses


@pytest.mark.parametrize("overrides", [
    {},
    {"sampling": {"drop_last": True}},  # two videos in no batch: no aug1 for them
    {"sampling": {"samples_per_video": 3, "frame_stride": 1}},  # overlapping clips
    {"sampling": {"shard": {"world_size": 3, "rank": 2}}},  # padding wraps around
    {"augmentation": FAILS_AT_ITERATION_1},
], ids=["plain", "drop_last", "overlapping", "shard", "failing_view"])
def test_the_view_holding_a_video_gives_what_the_whole_epoch_gave(tmp_path, overrides):
    plan = make_plan(tmp_path, videos=fake_videos(10, num_frames=12), epochs=2, **overrides)
    planner = FramePlanner()
    for epoch in range(plan.epochs):
        expected = whole_epoch_uses(plan, epoch)
        for video, info in enumerate(plan.videos):
            for frame in range(info.num_frames):
                clip = expected.get((video, frame))
                assert planner.uses(plan, epoch, video).first_use(frame) == clip
                depths = len(clip.step_depths) if clip else 0
                assert planner.max_depth(plan, epoch, video, frame) == depths
                for depth in range(1, depths + 1):
                    fplan = planner.frame_plan(plan, epoch, video, frame, depth)
                    assert fplan.ops == clip.ops[: clip.step_depths[depth - 1]]
                assert planner.frame_plan(plan, epoch, video, frame, depths + 1) is None


def test_only_the_views_holding_the_video_are_planned(tmp_path, monkeypatch):
    plan = make_plan(tmp_path, videos=fake_videos(10), epochs=2)
    planned = []
    real = plan.view_plan
    monkeypatch.setattr(plan, "view_plan", lambda e, i: planned.append((e, i)) or real(e, i))
    FramePlanner().max_depth(plan, 1, 7, 0)
    assert planned == [(1, i) for i in iterations_of(plan, 1, 7)] and len(planned) == 1


def test_depth_zero_is_the_decoded_frame_and_needs_no_planning(tmp_path, monkeypatch):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=2)
    monkeypatch.setattr(frameplanner, "video_uses", None)  # would fail if called
    planner = FramePlanner()
    full = planner.frame_plan(plan, 0, 0, 0, 0)
    assert full.ops == () and full.shape == (48, 64, 3) and full.nbytes > 48 * 64 * 3
    assert planner.frame_plan(plan, 0, 0, 10_000, 0) is None  # past the video's end


def test_failed_views_are_recorded_for_status(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(10), epochs=2,
                     augmentation=FAILS_AT_ITERATION_1)
    planner = FramePlanner()
    video = plan.batch_videos(0, 1)[0]
    assert planner.max_depth(plan, 0, video, 0) == 0  # its only view failed
    failures = planner.failures.of(plan.name)
    assert failures.failed_views == 1 and "division by zero" in failures.first_reason


async def test_kept_uses_are_bounded_and_recent_ones_stay(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=2)
    planner = FramePlanner(keep=2)
    for video in (0, 1, 0, 2):  # 0 used again: 1 is the oldest
        await planner.plan(plan, 0, video)
    assert [planner.planned(plan, 0, v) is not None for v in range(3)] == [True, False, True]
    planner.forget(plan.name)
    assert planner.planned(plan, 0, 0) is None


async def test_a_planning_error_reaches_every_waiter_and_is_not_kept(tmp_path, monkeypatch):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=2)

    def broken(*_):
        raise RuntimeError("planner bug")

    monkeypatch.setattr(frameplanner, "video_uses", broken)
    planner = FramePlanner()
    errors = []

    async def ask():
        try:
            await planner.plan(plan, 0, 0)
        except RuntimeError as exc:
            errors.append(str(exc))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(ask)
    assert errors == ["planner bug"] * 3 and planner.planned(plan, 0, 0) is None
