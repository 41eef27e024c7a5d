"""A task joining a live mount resolves its lead part's views in a planning thread while
another task's part holds the planner (`TaskJoins._resolve_lead`): at 250,000 videos it waited
0.4-0.7 s for that lock, then planned its lead part for 0.7 s. Its part, planned once the lock
is free, holds the views resolved ahead, unchanged; a window not frozen yet is left alone (a
task refused later shapes no window)."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace

import trio

from sandfs.plan.task import TaskPlan
from sandfs.plan.window import lead_batches, plan_window, view_key
from sandfs.sched import planning as planning_module
from sandfs.sched.joining import Lead, resolve_ahead
from sandfs.threads import limiter
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_scheduler import joining_task, scheduler_for, settle
from tests.unit.test_window_parts import until


def joiner(tmp_path, plan) -> TaskPlan:
    """A task of another seed on the mount's coordination, as `plan_new_task` makes it."""
    cfg = joining_task(tmp_path, plan).cfg
    plan.coordination.join(cfg, 0)
    return TaskPlan(cfg, plan.videos, k_epochs=plan.k_epochs, coordination=plan.coordination)


async def test_a_joining_task_resolves_its_lead_while_another_part_holds_the_lock(
        tmp_path, monkeypatch):
    monkeypatch.setattr(planning_module, "LEAD_CLIPS", 1)  # every window is large
    monkeypatch.setattr(planning_module, "LEAD_BATCHES", 1)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=40, workers=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await settle(scheduler)
        later = joiner(tmp_path, plan)
        joined = trio.Event()

        async def join():
            await scheduler.add_plan(later)
            joined.set()

        async with scheduler.planner.tasks_steady:  # another task's part being planned
            nursery.start_soon(join)
            with trio.fail_after(10):
                await until(lambda: (0, 0) in later._ahead)
            assert not joined.is_set() and later.name not in scheduler.book.plans
            ahead = later._ahead[0, 0]
            assert later.view_plan.cache_info().currsize == 0  # the table's clips, once
        with trio.fail_after(10):
            await joined.wait()
        held = scheduler.board.held_view(view_key(later, 0, 0))  # made from its row
        assert held == ahead and held.clips is ahead.clips
        assert not later._ahead  # taken by its part, or dropped once the window was planned
        nursery.cancel_scope.cancel()


def test_a_window_not_frozen_is_not_resolved_ahead(tmp_path):
    plan, _, _ = scheduler_for(tmp_path, videos=40, epochs=6)
    later = joiner(tmp_path, plan)
    lead = frozenset(later.listed[i].path for i in later.batch_slots(4, 0))
    resolve_ahead(later, later.window_of(4), lead)  # window 2: no task planned it
    assert not later._ahead
    assert plan.coordination.state()["windows"] == []
    resolve_ahead(later, 0, lead)  # nor window 0 yet
    assert not later._ahead


def test_a_lead_s_batches_come_from_its_places_as_from_a_walk(tmp_path):
    plan, _, _ = scheduler_for(tmp_path, videos=40, epochs=6)
    lead = Lead.of(plan, range(3))
    assert lead == {plan.listed[i].path for it in range(3) for i in plan.batch_slots(0, it)}
    for epoch in range(plan.epochs):
        assert lead_batches(plan, lead)(epoch) == lead_batches(plan, frozenset(lead))(epoch)


async def test_a_join_does_not_wait_for_registrations_stuck_in_their_planners(tmp_path):
    """Registrations stuck in their planners (a labels FIFO: `test_user_bounds`) hold every
    registration thread; a planned task joining meanwhile resolves its lead part in a
    planning thread, and is in the book without waiting for them."""
    plan, scheduler, _ = scheduler_for(tmp_path, videos=40, workers=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await settle(scheduler)
        later = joiner(tmp_path, plan)
        stuck = limiter("registration")
        for holder in [object() for _ in range(stuck.total_tokens)]:
            await stuck.acquire_on_behalf_of(holder)
        with trio.fail_after(10):
            await scheduler.add_plan(later)
        assert later.name in scheduler.book.plans
        nursery.cancel_scope.cancel()


async def test_a_join_cancelled_while_its_lead_is_resolved_stops_resolving(tmp_path):
    """Shutdown during a join: the thread resolving its lead stops at its next view
    (`STOP_PLANNING`) instead of resolving the rest."""
    plan, scheduler, _ = scheduler_for(tmp_path, videos=40, workers=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await settle(scheduler)
        later = joiner(tmp_path, plan)
        resolved, view_plan = [], later._view_plan

        def slow_view(epoch, iteration):
            resolved.append((epoch, iteration))
            time.sleep(0.5)
            return view_plan(epoch, iteration)

        later._view_plan = slow_view
        with trio.fail_after(10):
            async with trio.open_nursery() as joining:
                joining.start_soon(scheduler.add_plan, later)
                await until(lambda: resolved)
                joining.cancel_scope.cancel()  # the mount stops
        assert resolved == [(0, 0)] and later.name not in scheduler.book.plans
        nursery.cancel_scope.cancel()


def test_batches_resolved_ahead_go_once_their_window_is_planned(tmp_path):
    """A part that finds a batch resolved ahead planned already (`known`: a search trial's, or
    read by an identical pipeline) never takes it: planning the window drops it all the same,
    and none is held in `view_plan`'s cache either (the table holds the clips)."""
    for name in "ab":
        (tmp_path / name).mkdir()
    plan = make_plan(tmp_path / "a", videos=fake_videos(40), epochs=4)
    twin = make_plan(tmp_path / "b", videos=plan.videos, task="b", epochs=4)  # same batches
    for task in (plan, twin):
        for epoch in (0, 1, 2):
            task.resolve_ahead(epoch, 0)
    known = {view_key(plan, 0, i) for i in range(plan.iterations_per_epoch)}
    plan_window([plan, twin], 0, known)
    assert set(plan._ahead) == set(twin._ahead) == {(2, 0)}  # window 1's stay for it
    assert plan.view_plan.cache_info().currsize == twin.view_plan.cache_info().currsize == 0


def test_batches_resolved_ahead_are_dropped_while_a_joiner_takes_them():
    """A joiner's part takes its batches resolved ahead (`take_ahead`) in one planning thread
    while the planner drops another window's (`drop_ahead`) in the other: a drop that walked
    the dict as it changed raised, and stopped the scheduler."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors, stop = [], threading.Event()
    plan = SimpleNamespace(_ahead={})

    def joiner() -> None:
        while not stop.is_set():
            for iteration in range(4):
                plan._ahead[0, iteration] = object()
            for iteration in range(4):
                TaskPlan.take_ahead(plan, 0, iteration)

    thread = threading.Thread(target=joiner)
    try:
        thread.start()
        for _ in range(100_000):
            try:
                TaskPlan.drop_ahead(plan, {2, 3})
            except RuntimeError as exc:
                errors.append(exc)
                break
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    assert errors == []
