"""A window planned in parts beside other tasks. One joining whose batches are the window's
own tasks' (a search's trials with one seed: the same view keys), reading, and leaving: each
clip slot of the window is planned once, every reader is listed, every batch holds the bytes
of the window planned whole, and no video is decoded twice a window. A batch made before the
rest is planned reads back; a task in a window of its own does not force the rest; a shard's
window becomes whole."""

from __future__ import annotations

import time
from collections import Counter

import trio

from sandfs.plan.window import WindowPlan, batches_holding, lead_indices, view_key
from sandfs.sched import parts as parts_module
from sandfs.sched import planning as planning_module
from sandfs.sched import work
from sandfs.sched.parts import WindowParts
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_scheduler import RecordingMaterializer, joining_task, read_all, settle
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


def paced_own(tmp_path, monkeypatch) -> tuple:
    """`own_task`, its window 0 in parts of one batch's videos, each planned only as a reader
    comes within a batch of its frontier (the workers never idle)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan, scheduler, materializer = own_task(tmp_path, "parts")
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 1
    return plan, scheduler, materializer


async def read_some(scheduler, plan, iterations, made_before=()) -> None:
    """Read these batches of epoch 0; those `made_before` (read by another task and gone
    from memory) may be made on demand (None)."""
    for iteration in iterations:
        key = view_key(plan, 0, iteration)
        scheduler.opened(plan.name, 0, iteration)
        got = scheduler.ready_view(key, plan.name) or await scheduler.wait_view(key, plan.name)
        assert got is not None or iteration in made_before
        scheduler.released(plan.name, 0, iteration)


async def start_in_parts(nursery, scheduler, plan, read: int) -> None:
    """Run the scheduler, wait for window 0 to be planned in parts, read its first `read`
    batches."""
    await nursery.start(scheduler.run)
    await until(lambda: scheduler.book.rest_pending == {0})
    await read_some(scheduler, plan, range(read))


async def read_past(scheduler, plan, read: int) -> None:
    """Read the task's window 0 past its first `read` batches, none made on demand."""
    for epoch in range(2):
        for iteration in range(read if epoch == 0 else 0, plan.iterations_per_epoch):
            key = view_key(plan, epoch, iteration)
            scheduler.opened(plan.name, epoch, iteration)
            with trio.fail_after(10):
                assert (scheduler.ready_view(key, plan.name)
                        or await scheduler.wait_view(key, plan.name)) is not None
            scheduler.released(plan.name, epoch, iteration)


async def idle_until_whole(scheduler) -> Counter:
    """Let the workers idle until window 0's rest is planned: its uses by (batch, slot)."""
    scheduler.planner.idle = lambda: True
    scheduler.wake()
    await until(lambda: 0 not in scheduler.book.rest_pending)
    await settle(scheduler)
    window = scheduler.book.windows[0]
    return Counter((u.view, u.slot) for w in window.videos.values() for u in w.uses)


async def made_whole(scheduler) -> WindowPlan:
    """Window 0 once its rest is planned (the workers idle now), each slot of each of its
    batches planned once."""
    uses = await idle_until_whole(scheduler)
    window = scheduler.book.windows[0]
    assert uses == Counter((key, slot) for key, view in window.view_plans.items()
                           for slot in range(len(view.clips)))
    return window


async def shared_trial(tmp_path, monkeypatch, *, leaves: bool) -> None:
    whole = await read_all(*own_task(tmp_path, "whole")[:2])
    plan, scheduler, materializer = paced_own(tmp_path, monkeypatch)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await start_in_parts(nursery, scheduler, plan, 6)
            later = joining_task(tmp_path, plan, seed=0)
            assert view_key(later, 0, 5) == view_key(plan, 0, 5)  # the same batches
            await scheduler.add_plan(later)
            scheduler.opened(plan.name, 0, 6)
            # batches 0-5 read by the own task (some gone from memory), then ahead of it
            await read_some(scheduler, later, range(20), made_before=range(6))
            if leaves:
                await read_some(scheduler, plan, range(6, 9))
                await scheduler.remove_plan(later.name)
                # nor is a task registered again under its name one of the window's own
                assert all(later.name not in p.tasks for p in scheduler.planner._groups(0))
            window = await made_whole(scheduler)
        tasks = [plan.name] if leaves else sorted([plan.name, later.name])
        assert all(sorted(t for t, _ in readers) == tasks
                   for readers in window.readers.values())
        got = {}
        for epoch in range(plan.epochs):
            for iteration in range(plan.iterations_per_epoch):
                key = view_key(plan, epoch, iteration)
                scheduler.opened(plan.name, epoch, iteration)
                with trio.fail_after(10):
                    data = (scheduler.ready_view(key, plan.name)
                            or await scheduler.wait_view(key, plan.name))
                got[epoch, iteration] = None if data is None else bytes(data)
                scheduler.released(plan.name, epoch, iteration)
        nursery.cancel_scope.cancel()
    # a batch read before and gone from memory is made on demand (None), the same bytes
    read_back = {(0, i) for i in range(9 if leaves else 6)}
    assert {k: v for k, v in got.items() if v is not None or k not in read_back} == {
        k: v for k, v in whole.items() if got[k] is not None or k not in read_back}
    assert max(Counter(materializer.decoded).values()) == 2  # once a window, two windows


async def test_a_trial_with_the_window_s_batches_joins_its_parts(tmp_path, monkeypatch):
    """Planned in parts of its own, a joining trial's batches (the window's own) had their
    clips planned twice, and batches it added first lost the own task's reader."""
    await shared_trial(tmp_path, monkeypatch, leaves=False)


async def test_a_trial_leaving_keeps_the_batches_the_window_s_tasks_read(tmp_path,
                                                                        monkeypatch):
    """A joining trial that leaves released batches the window's own task read, whose videos
    its parts counted as planned: their reads waited for ever."""
    await shared_trial(tmp_path, monkeypatch, leaves=True)


async def test_a_batch_read_before_the_window_s_rest_is_planned_reads_back(tmp_path,
                                                                          monkeypatch):
    """The window's rest holds each of its batches: those made before and gone from memory
    were planned again without a clip to make, and a reader reading one back waited for ever
    (not made on demand)."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            await read_some(scheduler, plan, range(6))
            scheduler.planner.idle = lambda: True
            scheduler.wake()
            await until(lambda: 0 not in scheduler.book.rest_pending)
            gone = [i for i in range(6) if view_key(plan, 0, i) not in scheduler.board.ready]
            assert gone  # their buffers went to later batches
            key = view_key(plan, 0, gone[0])
            scheduler.opened(plan.name, 0, gone[0])
            assert not scheduler.board.is_planned(key)
            assert await scheduler.wait_view(key, plan.name) is None  # made on demand
        nursery.cancel_scope.cancel()


async def test_a_task_in_a_window_of_its_own_leaves_the_rest_to_the_parts(tmp_path,
                                                                         monkeypatch):
    """A task standing in a later window that the window in parts does not hold back (its
    tasks want windows 0 and 1, the other task reads in window 3) had the whole rest of
    window 0 planned at once; its own window is planned meanwhile."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan = make_plan(tmp_path, videos=VIDEOS, epochs=8, k_epochs=2)  # windows 0-3
    (tmp_path / "other").mkdir()
    other = make_plan(tmp_path / "other", videos=fake_videos(40), epochs=8, k_epochs=2,
                      task="other", seed=3)
    scheduler = Scheduler([plan, other], RecordingMaterializer(None), Stats(), workers=2,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2))
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 1
    scheduler.opened(other.name, 6, 0)  # window 3
    scheduler.opened(plan.name, 0, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            await read_some(scheduler, plan, range(2))
            key = view_key(other, 6, 0)
            assert await scheduler.wait_view(key, other.name) is not None
        assert 0 in scheduler.book.rest_pending
        nursery.cancel_scope.cancel()


async def test_a_rest_forced_during_a_joiner_s_lead_part_skips_its_parts(tmp_path,
                                                                        monkeypatch):
    """A reader jumping to a later window forces the window's rest at once; a task joining
    meanwhile had its parts, registered before its lead part, planned whole as a rest while
    that lead part was still being planned: its lead videos' slots were planned twice."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    planned = work.plan_task_part

    def slow_lead(task_plan, window, store, known=frozenset(), lead=None, *args):
        if lead is not None and task_plan.name == "later":
            time.sleep(0.6)  # in its thread: the jump comes while it is planned
        return planned(task_plan, window, store, known, lead, *args)

    monkeypatch.setattr(work, "plan_task_part", slow_lead)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await start_in_parts(nursery, scheduler, plan, 2)
            later = joining_task(tmp_path, plan, seed=9)
            nursery.start_soon(scheduler.add_plan, later)
            await until(lambda: "later" in scheduler.planner._joiner_parts.get(0, {}))
            scheduler.opened(plan.name, 2, 0)  # window 1, not planned: window 0's rest now
            scheduler.wake()
            await trio.sleep(2)
            uses = await idle_until_whole(scheduler)
        assert max(uses.values()) == 1
        nursery.cancel_scope.cancel()


async def test_trials_joining_with_one_seed_share_their_parts(tmp_path, monkeypatch):
    """Two trials with one seed (not the window's own) join while the window is in parts;
    the first leaves: each slot of their batches is planned once, the second reads them all."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(20):
            await until(lambda: scheduler.book.rest_pending == {0})
            first = joining_task(tmp_path, plan)
            await scheduler.add_plan(first)
            scheduler.opened(plan.name, 0, 0)
            await read_some(scheduler, first, range(6))
            second = joining_task(tmp_path, plan, name="second")
            assert view_key(second, 0, 3) == view_key(first, 0, 3)
            await scheduler.add_plan(second)
            await read_some(scheduler, second, range(12), made_before=range(6))
            await scheduler.remove_plan(first.name)
            window = await made_whole(scheduler)
        own_key = view_key(plan, 0, 0).plan_key
        assert all([t for t, _ in readers] == [plan.name if key.plan_key == own_key else "second"]
                   for key, readers in window.readers.items())
        await read_past(scheduler, second, 12)
        nursery.cancel_scope.cancel()


async def test_trials_with_one_seed_joining_at_once_share_their_parts(tmp_path, monkeypatch):
    """Two trials with one seed join together (the second while the first's lead part is
    planned); the first leaves: each slot of their batches is planned once, and the second
    reads every batch planned after it left, none made on demand."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await start_in_parts(nursery, scheduler, plan, 2)
            first = joining_task(tmp_path, plan)
            second = joining_task(tmp_path, plan, name="second")
            async with trio.open_nursery() as joining:
                joining.start_soon(scheduler.add_plan, first)
                joining.start_soon(scheduler.add_plan, second)
            await read_some(scheduler, first, range(6))
            await read_some(scheduler, second, range(12), made_before=range(6))
            await scheduler.remove_plan(first.name)
        await read_past(scheduler, second, 12)
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()


def short_and_long(tmp_path) -> list:
    """Two trials with one seed: reading the window's first epoch, and both."""
    trials = []
    for name, epochs in [("short", 1), ("long", 2)]:
        (tmp_path / name).mkdir()
        trials.append(make_plan(tmp_path / name, videos=VIDEOS, epochs=epochs, k_epochs=2,
                                task=name, seed=7))
    return trials


async def test_a_trial_reading_more_epochs_plans_the_shared_parts(tmp_path, monkeypatch):
    """A trial with one seed reading both epochs of the window joins the parts of one
    reading its first only: its second epoch's batches are planned too, none made on demand,
    and each slot once."""
    plan, scheduler, _ = paced_own(tmp_path, monkeypatch)
    short, long = short_and_long(tmp_path)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await start_in_parts(nursery, scheduler, plan, 2)
            await scheduler.add_plan(short)
            await read_some(scheduler, short, range(3))
            await scheduler.add_plan(long)
            await read_some(scheduler, long, range(long.iterations_per_epoch),
                            made_before=range(3))
        await read_past(scheduler, long, long.iterations_per_epoch)
        with trio.fail_after(20):
            await made_whole(scheduler)
        nursery.cancel_scope.cancel()


async def test_a_shard_s_window_in_parts_becomes_whole(tmp_path, monkeypatch):
    """A task reading one shard of four (a quarter of the listed videos) idles: its window
    in parts becomes whole (each slot planned once), and the next window is planned."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan = make_plan(tmp_path, videos=VIDEOS, epochs=4, k_epochs=2,
                     sampling={"shard": {"world_size": 4, "rank": 1}})
    scheduler = Scheduler([plan], RecordingMaterializer(None), Stats(), workers=2,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2))
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await start_in_parts(nursery, scheduler, plan, 2)
            await made_whole(scheduler)
            await until(lambda: 1 in scheduler.book.windows)
        nursery.cancel_scope.cancel()


def test_a_part_s_batches_come_from_places_for_each_trial_of_one_dataset(tmp_path,
                                                                         monkeypatch):
    """Two trials list the same videos in equal tuples, not one: each finds a part's batches
    from their places in its epochs' order, not from a walk of the listing, and finds the
    batches the walk finds."""
    plans = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        plans.append(make_plan(tmp_path / name, videos=VIDEOS, epochs=4, k_epochs=2,
                               task=name, seed=7))
    plans[1].listed = tuple(list(plans[0].listed))
    assert plans[1].listed == plans[0].listed and plans[1].listed is not plans[0].listed
    parts = WindowParts(0, (), [p.name for p in plans])
    part = parts.next(plans, {p.name: 0 for p in plans}, ahead=1, batches=2, sweep=lambda: False)
    walked = [batches_holding(p, 0, lead_indices(p, part)) for p in plans]
    assert part and all(walked)
    monkeypatch.setattr(parts_module, "batches_holding", None)  # no walk: called, it fails
    assert [part.batches_of(p, 0) for p in plans] == walked
