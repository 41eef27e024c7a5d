"""The next large window is planned as its readers near it (docs/design.md#planning-ahead):
its lead part (its first batches) once the current window is whole, its rest swept only once
a reader is within `plan_next_within` of a window's batches of it, so it is whole before a
reader crosses into it, and a reader arriving there meanwhile is served from its lead part."""

from __future__ import annotations

import threading

import trio

from sandfs.plan.window import view_key
from sandfs.sched import planning as planning_module
from tests.unit.test_scheduler import scheduler_for
from tests.unit.test_window_parts import in_parts, until

VIDEOS = 160  # windows of 2 epochs


def two_windows(tmp_path, monkeypatch, within: float = 0.25):
    """160 videos, 4 epochs in windows of 2, every window planned in parts (a lead part of
    one batch's videos, then parts of 2 batches), the workers idle to the planner (a window
    where a reader stands is swept at once)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=VIDEOS, epochs=4, workers=2)
    scheduler.planner.plan_next_within = within
    return plan, scheduler


async def read(scheduler, plan, index: int) -> None:
    """The reader opens the task's batch at `index` (from epoch 0's first), has it, and
    releases it."""
    epoch, iteration = divmod(index, plan.iterations_per_epoch)
    scheduler.opened(plan.name, epoch, iteration)
    key = view_key(plan, epoch, iteration)
    with trio.fail_after(10):
        got = scheduler.ready_view(key, plan.name) or await scheduler.wait_view(key, plan.name)
    assert got is not None
    scheduler.released(plan.name, epoch, iteration)


async def window_0_whole(scheduler, plan, nursery) -> None:
    """The scheduler started in `nursery`, batch 0 read: until window 0 is whole."""
    await nursery.start(scheduler.run)
    await read(scheduler, plan, 0)
    with trio.fail_after(10):
        await until(lambda: 0 in scheduler.book.windows and 0 not in scheduler.book.rest_pending)


def next_window_videos(scheduler) -> int:
    window = scheduler.book.windows.get(1)
    return 0 if window is None else len(window.videos)


async def test_the_next_window_holds_its_lead_part_until_a_reader_nears_it(tmp_path,
                                                                           monkeypatch):
    """Window 1 was planned whole as soon as window 0 was: 250,000 videos' daemon held ~400
    MB more from then on, an epoch or more before a reader came to it. It holds its first
    batches' videos until a reader is within a quarter of a window of it, the workers idle
    meanwhile; then it is swept whole."""
    plan, scheduler = two_windows(tmp_path, monkeypatch)
    lead = {plan.listed[i].path for i in plan.batch_slots(2, 0)}
    near = 2 * plan.iterations_per_epoch * 3 // 4  # a quarter of a window before window 1
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await read(scheduler, plan, 0)
        with trio.fail_after(10):
            await until(lambda: 0 in scheduler.book.windows
                        and 0 not in scheduler.book.rest_pending and next_window_videos(scheduler))
        for _ in range(20):  # the planner woken again and again: nothing more of window 1
            scheduler.wake()
            await trio.sleep(0.01)
        assert set(scheduler.book.windows[1].videos) == lead
        assert 1 in scheduler.book.rest_pending
        await read(scheduler, plan, near - 1)  # not yet
        scheduler.wake()
        await trio.sleep(0.1)
        assert set(scheduler.book.windows[1].videos) == lead
        await read(scheduler, plan, near)
        with trio.fail_after(10):
            await until(lambda: 1 not in scheduler.book.rest_pending)
        nursery.cancel_scope.cancel()
    assert next_window_videos(scheduler) == VIDEOS


async def test_the_next_window_is_whole_before_a_reader_at_its_pace_crosses_into_it(
        tmp_path, monkeypatch):
    """A reader reading window 0 batch after batch finds window 1 whole as it crosses into
    it: its rest was swept in the last quarter of window 0."""
    plan, scheduler = two_windows(tmp_path, monkeypatch)
    per_window = 2 * plan.iterations_per_epoch
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        for index in range(per_window):
            await read(scheduler, plan, index)
            if index < per_window * 3 // 4 - 1:  # not swept early
                assert next_window_videos(scheduler) < VIDEOS
            await trio.sleep(0.02)  # the reader's pace
        assert 1 not in scheduler.book.rest_pending
        assert next_window_videos(scheduler) == VIDEOS
        await read(scheduler, plan, per_window)
        nursery.cancel_scope.cancel()


async def test_a_reader_at_the_window_s_turn_is_not_held_by_its_sweep(tmp_path, monkeypatch):
    """A reader that comes to window 1's first batch while a swept part of it is planned has
    that batch from the lead part, the sweep still held in its thread."""
    plan, scheduler = two_windows(tmp_path, monkeypatch, within=1.0)
    hold, held = threading.Event(), threading.Event()
    planned = scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        if window == 1 and skip and getattr(lead, "swept", False):
            held.set()
            assert hold.wait(10)
        return planned(window, lead, skip, tasks)

    scheduler.planner.plan_active = planning
    turn = 2 * plan.iterations_per_epoch
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            await read(scheduler, plan, 0)
            with trio.fail_after(10):
                await until(held.is_set)
            await read(scheduler, plan, turn - 1)
            await read(scheduler, plan, turn)  # served while the swept part is held
            assert not hold.is_set() and 1 in scheduler.book.rest_pending
            hold.set()
            nursery.cancel_scope.cancel()
    finally:
        hold.set()


async def test_memory_is_given_back_once_a_window_is_whole_and_once_it_is_dropped(
        tmp_path, monkeypatch):
    """A window made whole from its parts, and one dropped behind its readers, leave much free
    in malloc's heaps: given back to the kernel in a thread (`runtime.trim_free_memory`)."""
    trimmed = []
    monkeypatch.setattr(planning_module, "trim_free_memory",
                        lambda: trimmed.append(threading.current_thread().name))
    plan, scheduler = two_windows(tmp_path, monkeypatch, within=1.0)
    turn = 2 * plan.iterations_per_epoch
    async with trio.open_nursery() as nursery:
        await window_0_whole(scheduler, plan, nursery)
        with trio.fail_after(10):
            await until(lambda: trimmed)  # window 0 whole
            await until(lambda: 1 in scheduler.book.windows
                        and 1 not in scheduler.book.rest_pending)
            await until(lambda: len(trimmed) >= 2)  # window 1 whole
        await read(scheduler, plan, turn)
        with trio.fail_after(10):
            await until(lambda: 0 not in scheduler.book.windows and len(trimmed) >= 3)
        nursery.cancel_scope.cancel()
    assert threading.main_thread().name not in trimmed


async def test_memory_is_given_back_while_a_window_is_swept(tmp_path, monkeypatch):
    """A window swept in parts frees each part's makings: given back as it goes (at most every
    `TRIM_EVERY_S`), not only once whole, so they do not add up to the daemon's peak."""
    trimmed = []
    monkeypatch.setattr(planning_module, "trim_free_memory", lambda: trimmed.append(1))
    monkeypatch.setattr(planning_module, "TRIM_EVERY_S", 0.0)
    plan, scheduler = two_windows(tmp_path, monkeypatch, within=0.0)
    async with trio.open_nursery() as nursery:
        await window_0_whole(scheduler, plan, nursery)
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert len(trimmed) > 2  # parts swept, then the window whole
