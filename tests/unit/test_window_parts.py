"""A large window planned in parts as its videos are probed (docs/contract.md#lazy-scan): a
reader past the first batches waits for its batch's part, not for the whole window; the views
are those of the window planned whole; and nothing of a window's pruning, nor the decision
whether it needs any, runs on the event loop."""

from __future__ import annotations

import threading

import trio

from sandfs.cache import ObjectStore
from sandfs.plan.window import WindowPlan
from sandfs.sched import objects
from sandfs.sched import planning as planning_module
from tests.unit.test_scheduler import (
    half_the_clips,
    scheduler_for,
    window_0_refined,
)


def in_parts(monkeypatch) -> None:
    monkeypatch.setattr(planning_module, "LEAD_CLIPS", 1)  # every window where a task stands
    monkeypatch.setattr(planning_module, "LEAD_BATCHES", 1)


async def test_a_window_whole_from_parts_is_pruned_off_the_event_loop(tmp_path, monkeypatch):
    """At 250,000 videos whether a window needs pruning (a pass over its 1.25M clips) took
    the event loop 1.2 s as its last part was added, and its snapshot for the pruning thread
    more. Both run in the pruning thread: a window that fits is not pruned, one that does not
    is."""
    in_parts(monkeypatch)
    loop_thread, calls = threading.get_ident(), []
    sizes, snapshot = objects.leaves_nbytes, WindowPlan.snapshot

    def leaves_nbytes(plan):
        calls.append(("fits?", threading.get_ident()))
        return sizes(plan)

    def snapshotting(plan):
        calls.append(("snapshot", threading.get_ident()))
        return snapshot(plan)

    monkeypatch.setattr(objects, "leaves_nbytes", leaves_nbytes)
    monkeypatch.setattr(WindowPlan, "snapshot", snapshotting)
    plan, _, _ = scheduler_for(tmp_path, videos=40)
    with ObjectStore(str(tmp_path / "cache"), half_the_clips(plan)) as store:
        plan, scheduler, _ = scheduler_for(tmp_path, videos=40, store=store, workers=2)
        refined = window_0_refined(scheduler)
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            with trio.fail_after(10):
                await refined.wait()
            nursery.cancel_scope.cancel()
    assert {kind for kind, _ in calls} == {"fits?", "snapshot"}
    assert all(thread != loop_thread for _, thread in calls), calls
