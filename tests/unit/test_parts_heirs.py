"""A trial joining, with one seed, the parts of a task whose lead part is being planned
(`TaskJoins._hand_over`): when that lead part fails, or is over and the trial reads more of
the window's epochs, the parts go on with the trial. Dropped, the trial's batches were made on
demand, each video decoded again. A task whose part was planned whole is no heir, nor is a
task that left, or a new one registered under its name."""

from __future__ import annotations

import threading
from functools import partial

import trio

from sandfs.sched import parts as parts_module
from sandfs.sched import work
from tests.helpers.plans import make_plan
from tests.unit.test_parts_shared import (
    VIDEOS,
    made_whole,
    paced_own,
    read_past,
    read_some,
    short_and_long,
)
from tests.unit.test_scheduler import joining_task
from tests.unit.test_window_parts import until


def gated_lead(monkeypatch, name: str, *, fails: bool) -> threading.Event:
    """`name`'s lead part is planned once the event is set (then raises, if `fails`)."""
    planned, go = work.plan_task_part, threading.Event()

    def lead_part(task_plan, window, store, known=frozenset(), lead=None, *args):
        if task_plan.name == name and lead is not None and not isinstance(lead,
                                                                          parts_module.Part):
            go.wait(10)
            if fails:
                raise RuntimeError("its lead part failed")
        return planned(task_plan, window, store, known, lead, *args)

    monkeypatch.setattr(work, "plan_task_part", lead_part)
    return go


async def second_joins_during_first_lead(nursery, scheduler, plan, join_first, first: str,
                                         second, go: threading.Event) -> None:
    """The own task reads its first batches; `join_first` starts the first trial's join, the
    second joins its parts while its lead part (gated by `go`) is planned, then `go` is set."""
    await until(lambda: scheduler.book.rest_pending == {0})
    await read_some(scheduler, plan, range(2))
    nursery.start_soon(join_first)
    await until(lambda: first in scheduler.planner._joiner_parts.get(0, {}))
    await scheduler.add_plan(second)  # joins the first's parts
    go.set()


async def long_heir_of_short(nursery, scheduler, plan, short, long, go: threading.Event
                             ) -> parts_module.WindowParts:
    """Trial `long` joins `short`'s parts during its lead part; once that part is planned, the
    parts go on with `long` (returned)."""
    await second_joins_during_first_lead(nursery, scheduler, plan, partial(
        scheduler.add_plan, short), short.name, long, go)
    await until(lambda: long.name in scheduler.planner._joiner_parts.get(0, {}))
    return scheduler.planner._joiner_parts[0][long.name]


async def test_a_trial_inherits_the_parts_of_a_lead_part_that_failed(tmp_path, monkeypatch):
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    go = gated_lead(monkeypatch, "later", fails=True)
    first = joining_task(tmp_path, plan)
    second = joining_task(tmp_path, plan, name="second")

    async def join_first():  # as ViewService.add_task: a task that fails leaves
        try:
            await scheduler.add_plan(first)
        except RuntimeError:
            await scheduler.remove_plan(first.name)

    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(20):
            await second_joins_during_first_lead(nursery, scheduler, plan, join_first,
                                                 first.name, second, go)
            await until(lambda: first.name not in scheduler.book.plans)
            assert second.name in scheduler.planner._joiner_parts[0]
            await read_some(scheduler, second, range(12))  # none made on demand
        await read_past(scheduler, second, 12)
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()


async def test_a_trial_reading_more_epochs_widens_once_the_lead_part_is_planned(
        tmp_path, monkeypatch):
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    go = gated_lead(monkeypatch, "short", fails=False)
    short, long = short_and_long(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(20):
            await second_joins_during_first_lead(nursery, scheduler, plan, partial(
                scheduler.add_plan, short), short.name, long, go)
            await until(lambda: not scheduler.planner._joiner_parts[0][short.name].leading
                        if short.name in scheduler.planner._joiner_parts.get(0, {}) else True)
            await read_some(scheduler, short, range(3))
            await read_some(scheduler, long, range(long.iterations_per_epoch),
                            made_before=range(3))
        await read_past(scheduler, long, long.iterations_per_epoch)  # epoch 1: none on demand
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()


async def test_a_trial_planned_whole_is_not_the_heir_of_the_parts(tmp_path, monkeypatch):
    """A trial whose part was planned whole hands its parts to a trial with its seed reading
    more epochs; that one leaving, the parts go (the first's batches there are planned), not
    back to the first: they stayed with it, and the window stayed in parts once its own task
    had read it all."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    short, long = short_and_long(tmp_path)
    planner, lead_videos, plan_part = scheduler.planner, scheduler.planner._lead_videos, \
        work.plan_task_part
    monkeypatch.setattr(planner, "_lead_videos", lambda window, tasks=None: (
        None if tasks and tasks[0] is short else lead_videos(window, tasks)))
    go = threading.Event()

    def gated(task, window, *args, **kwargs):  # short's part, planned whole, waits
        if task is short:
            go.wait(10)
        return plan_part(task, window, *args, **kwargs)

    monkeypatch.setattr(work, "plan_task_part", gated)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(20):
            await long_heir_of_short(nursery, scheduler, plan, short, long, go)
            await scheduler.remove_plan("long")
            assert "short" not in planner._joiner_parts.get(0, {})
        await read_past(scheduler, plan, 2)
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()


async def test_a_task_that_left_shares_no_parts_with_a_task_of_its_name(tmp_path, monkeypatch):
    """A trial that handed its parts to the trial that joined them leaves; a task of its name
    but another seed registered later neither reads their batches (views of another seed held
    for it) nor inherits them when that trial leaves (its own parts overwritten)."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    go = gated_lead(monkeypatch, "short", fails=False)
    short, long = short_and_long(tmp_path)
    planner = scheduler.planner
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(20):
            group = await long_heir_of_short(nursery, scheduler, plan, short, long, go)
            await scheduler.remove_plan("short")
            assert "short" not in group.tasks
            (tmp_path / "again").mkdir()
            again = make_plan(tmp_path / "again", videos=VIDEOS, epochs=1, k_epochs=2,
                              task="short", seed=8)
            await scheduler.add_plan(again)
            assert planner._sharing("long", 0) == set()
            await scheduler.remove_plan("long")
            assert planner._joiner_parts.get(0, {}).get("short") is not group
        await read_past(scheduler, plan, 2)
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()
