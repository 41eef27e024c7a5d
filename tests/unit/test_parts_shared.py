"""A window planned in parts, read back and shared: a batch made before the window's rest is
planned reads back."""

from __future__ import annotations

import trio

from sandfs.plan.window import view_key
from sandfs.sched import planning as planning_module
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_scheduler import RecordingMaterializer
from tests.unit.test_window_parts import in_parts, until, workers_busy

VIDEOS = fake_videos(160)


def own_task(tmp_path, name: str) -> tuple:
    """A mount of 160 videos, 4 epochs in windows of 2: (plan, scheduler, materializer)."""
    (tmp_path / name).mkdir()
    plan = make_plan(tmp_path / name, videos=VIDEOS, epochs=4, k_epochs=2)
    materializer = RecordingMaterializer(None)
    scheduler = Scheduler([plan], materializer, Stats(), workers=2,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2))
    return plan, scheduler, materializer


async def read_some(scheduler, plan, iterations) -> None:
    for iteration in iterations:
        key = view_key(plan, 0, iteration)
        scheduler.opened(plan.name, 0, iteration)
        assert (scheduler.ready_view(key, plan.name)
                or await scheduler.wait_view(key, plan.name)) is not None
        scheduler.released(plan.name, 0, iteration)


async def test_a_batch_read_before_the_window_s_rest_is_planned_reads_back(tmp_path,
                                                                          monkeypatch):
    """The window's rest holds each of its batches: those made before and gone from memory
    were planned again without a clip to make, and a reader reading one back waited for ever
    (not made on demand)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan, scheduler, _ = own_task(tmp_path, "parts")
    workers_busy(scheduler)
    scheduler.planner.plan_ahead = 1
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            await read_some(scheduler, plan, range(6))
            scheduler.planner.idle = lambda: True
            scheduler.wake()
            await until(lambda: not scheduler.book.rest_pending)
            gone = [i for i in range(6) if view_key(plan, 0, i) not in scheduler.board.ready]
            assert gone  # their buffers went to later batches
            key = view_key(plan, 0, gone[0])
            scheduler.opened(plan.name, 0, gone[0])
            assert not scheduler.board.is_planned(key)
            assert await scheduler.wait_view(key, plan.name) is None  # made on demand
        nursery.cancel_scope.cancel()
