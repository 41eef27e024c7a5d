"""A custom step that fails (raises in the daemon, or out of process raises, segfaults or hangs)
fails only the views whose clips need it, even when another task shares the video's decode
pass: that task's views, and the failing task's views that do not use the step, are served
byte-exact (equal to the reference oracle); status reports the failure for the failing task
only. In process, through the scheduler with the real materializer on a real dataset."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Awaitable, Callable

import custom_ops
import pytest
import trio

from sandfs import ops as oplib
from sandfs.materialize import Materializer
from sandfs.ops import isolated
from sandfs.ops.base import OpType
from sandfs.plan.window import view_key
from sandfs.sched.flights import ObjectFailed
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import build_plans
from tests.helpers.processes import segments_of
from tests.helpers.reference import reference_view


class RaiseInThread(OpType):
    """A custom step run in the daemon's threads that always raises."""

    name = "test_raise_in_thread"

    def validate(self, raw):
        return {}

    def apply(self, params, drawn, frame):
        raise ValueError("told to raise")


custom_ops.register()
if RaiseInThread.name not in oplib.op_names():
    oplib.register_op(RaiseInThread)

FAILING = {  # (step, reason of its failed views)
    "thread_raise": ({"test_raise_in_thread": {}}, "ValueError: told to raise"),
    "process_raise": ({"test_misbehave": {"how": "raise"}},
                      "IsolatedOpError: isolated op test_misbehave: ValueError: told to raise"),
    "segfault": ({"test_misbehave": {"how": "segfault"}},
                 "WorkerLost: isolated op test_misbehave: its worker process died "
                 "(signal SIGSEGV)"),
    "hang": ({"test_misbehave": {"how": "hang"}},
             "WorkerLost: isolated op test_misbehave: no result within timeout_s (1.5 s)"),
}


class CountingMaterializer(Materializer):
    """The real materializer, counting decode passes per video."""

    def __init__(self, stats: Stats) -> None:
        super().__init__(stats)
        self.passes: list[str] = []

    def decode_each(self, info, wanted):
        self.passes.append(info.rel_path)
        return super().decode_each(info, wanted)


@pytest.fixture
def clean_pool():
    """A fresh pool (its counters from zero), and nothing left behind."""
    isolated.shutdown()
    yield
    isolated.shutdown()
    assert segments_of(os.getpid()) == set()


def two_tasks(tmp_path, dataset_dir, step: dict, seed: int = 0) -> dict:
    """`plain` (the default pipeline) and `bad` (a resize, then `step` on about half of the
    clips: a random branch) on the same four videos, one clip per batch, four epochs in one
    window (so a video's pass makes four clips of each task)."""
    videos = tmp_path / "videos"
    shutil.copytree(dataset_dir / "archery", videos / "archery")
    common = {"epochs": 4, "seed": seed, "sampling": {"videos_per_batch": 1},
              "engine": {"k_epochs": 4, "workers": 2}}
    plain = task_config(videos, task="plain", **common)
    bad = task_config(videos, task="bad", **common, augmentation=[
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"shape": [32, 32]}}]},
        {"name": "maybe_bad", "branch_type": "random", "inputs": ["r"], "outputs": ["o"],
         "branches": [{"prob": 0.5, "config": [step]}, {"prob": 0.5, "config": []}]}])
    return build_plans([write_config(tmp_path / "plain.yaml", plain),
                        write_config(tmp_path / "bad.yaml", bad)])


async def read_every_view(scheduler: Scheduler, plans: dict, *,
                          before_stop: Callable[[], Awaitable[None]] | None = None) -> dict:
    """(task, epoch, iteration) -> the view's bytes, or the ObjectFailed reason; `before_stop`
    is awaited after the last read, the scheduler still running."""
    got = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        for name, plan in plans.items():
            for epoch in range(plan.epochs):
                for iteration in range(plan.iterations_per_epoch):
                    key = view_key(plan, epoch, iteration)
                    scheduler.opened(name, epoch, iteration)
                    try:
                        data = (scheduler.ready_view(key, name)
                                or await scheduler.wait_view(key, name))
                        got[name, epoch, iteration] = bytes(data)
                    except ObjectFailed as exc:
                        assert scheduler.view_state(key) == "failed"
                        got[name, epoch, iteration] = str(exc)
                    scheduler.released(name, epoch, iteration)
        if before_stop is not None:
            await before_stop()
        nursery.cancel_scope.cancel()
    return got


def uses_step(plan, epoch: int, iteration: int, step: str) -> bool:
    return any(op.name == step for clip in plan.view_plan(epoch, iteration).clips
               for op in clip.ops)


def with_both_kinds(tmp_path, dataset_dir, step: dict) -> dict:
    """`two_tasks` with a seed whose draws give `bad` views with the step and without, and a
    video with two clips that need it. Draws follow the dataset's identity (its files' sizes),
    and seed 0 alone left that to chance: about 1% (every video with at most one of its four
    clips drawn into the step) of failing."""
    step_name = next(iter(step))
    for seed in range(20):
        plans = two_tasks(tmp_path / f"seed{seed}", dataset_dir, step, seed)
        bad = plans["bad"]
        failing = [(e, i) for e in range(bad.epochs) for i in range(bad.iterations_per_epoch)
                   if uses_step(bad, e, i, step_name)]
        videos = Counter(bad.view_plan(e, i).clips[0].video_index for e, i in failing)
        if 0 < len(failing) < bad.epochs * bad.iterations_per_epoch and max(videos.values()) > 1:
            return plans
    raise AssertionError("no seed in 0-19 draws both kinds of views")


@pytest.mark.parametrize("how", list(FAILING))
async def test_a_failing_step_fails_only_the_views_that_need_it(tmp_path, dataset_dir, how,
                                                                clean_pool):
    step, reason = FAILING[how]
    step_name = next(iter(step))
    plans = with_both_kinds(tmp_path, dataset_dir, step)
    stats = Stats()
    materializer = CountingMaterializer(stats)
    scheduler = Scheduler(list(plans.values()), materializer, stats, workers=2,
                          memory_limit_bytes=1 << 28, limiter=trio.CapacityLimiter(2))
    got = await read_every_view(scheduler, plans)

    plain, bad = plans["plain"], plans["bad"]
    videos = len(plain.videos)
    assert sorted(materializer.passes) == sorted({v.rel_path for v in plain.videos})  # shared
    for (name, epoch, iteration), data in got.items():
        plan = plans[name]
        if name == "bad" and uses_step(bad, epoch, iteration, step_name):
            assert data == reason
        else:
            assert data == reference_view(plan, epoch, iteration), (name, epoch, iteration)
    failing = [(e, i) for (n, e, i) in got if n == "bad" and uses_step(bad, e, i, step_name)]
    assert 0 < len(failing) < bad.epochs * bad.iterations_per_epoch  # both kinds are there
    assert scheduler.failures.of("bad").failed_views == len(failing)
    assert scheduler.failures.of("bad").first_reason == reason
    assert scheduler.failures.of("plain").failed_views == 0
    if how == "thread_raise":
        return
    # out of process: a raise is answered per call (one per failing clip: it fails on its
    # first frame); a dead or hung worker fails the step for the rest of its decode pass
    # (one crash or timeout per video, however many of its clips need the step)
    clips_per_video = {}
    for epoch, iteration in failing:
        clip = bad.view_plan(epoch, iteration).clips[0]
        clips_per_video[clip.video_index] = clips_per_video.get(clip.video_index, 0) + 1
    assert max(clips_per_video.values()) > 1 and len(clips_per_video) <= videos
    expected = len(failing) if how == "process_raise" else len(clips_per_video)
    assert isolated.status()["failed"] == expected
