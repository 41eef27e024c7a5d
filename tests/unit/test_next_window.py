"""The windows after a window planned in parts (docs/design.md#planning-ahead): the next one
planned whole as soon as the current one is, with the future ones its passes carry for; windows
behind every reader dropped while a window waits for its next part; memory given back to the
kernel once a window is whole or dropped."""

from __future__ import annotations

import threading
import time
from contextlib import asynccontextmanager

import trio

from sandfs.cache import ObjectStore
from sandfs.plan.window import view_key
from sandfs.sched import planning as planning_module
from sandfs.sched import trims as trims_module
from sandfs.sched.jobs import VideoJobKey
from tests.unit.test_scheduler import scheduler_for
from tests.unit.test_window_parts import in_parts, until, workers_busy

VIDEOS = 160  # windows of 2 epochs


def two_windows(tmp_path, monkeypatch, epochs: int = 4):
    """160 videos, `epochs` in windows of 2, every window planned in parts (a lead part of
    one batch's videos, then parts of 2 batches), the workers idle to the planner (a window
    where a reader stands is swept at once)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=VIDEOS, epochs=epochs, workers=2)
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


@asynccontextmanager
async def carrying(tmp_path, monkeypatch, epochs: int):
    """160 videos in windows of 2 epochs, every window where a reader stands planned in parts,
    a store and `decode_ahead` 1, batch 0 read: (plan, scheduler) once window 0 is whole and
    window 2 is planned to carry for; stopped on leaving."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    with ObjectStore(str(tmp_path / "cache"), 1 << 30) as store:
        plan, scheduler, _ = scheduler_for(tmp_path, videos=VIDEOS, epochs=epochs, workers=2,
                                           store=store, decode_ahead=1)
        async with trio.open_nursery() as nursery:
            await window_0_whole(scheduler, plan, nursery)
            with trio.fail_after(10):
                await until(lambda: 2 in scheduler.book.future)
            yield plan, scheduler
            nursery.cancel_scope.cancel()


async def test_a_window_in_parts_carries_for_the_next_and_future_windows_once_whole(
        tmp_path, monkeypatch):
    """Window 0, planned in parts, is whole: window 1 is planned whole at once and the future
    windows after it (to carry for) with it, so window 0's passes (its epoch 0 reads every
    video) carry frames for all of window 1 and the next. Held back to its first batches until
    a reader neared it, window 1 had 4 of its 160 videos planned and no future window: every
    window in parts decoded nearly every video again."""
    async with carrying(tmp_path, monkeypatch, epochs=8) as (_, scheduler):
        assert 1 not in scheduler.book.rest_pending
        assert [(w, len(videos)) for w, videos in scheduler.book.later(0, 2)] == [
            (1, VIDEOS), (2, VIDEOS)]


async def jump(scheduler, plan, monkeypatch, window: int) -> None:
    """The reader jumps from window 0 into `window`, planned in parts, whose rest waits (no
    reader near its frontier, the workers busy): until window 0 is dropped."""
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 0  # no part due as readers come
    await read(scheduler, plan, 2 * window * plan.iterations_per_epoch)
    with trio.fail_after(10):
        await until(lambda: 0 not in scheduler.book.windows)
    assert window in scheduler.book.rest_pending


async def test_a_window_in_parts_is_carried_for_from_its_plan_for_videos_not_planned_yet(
        tmp_path, monkeypatch):
    """A reader jumps into window 2, planned in parts, whose rest waits: a pass of window 1
    carries for window 2 from the plan made to carry for it, for the videos its parts have not
    planned yet (those whose own pass is not window 2's, and that no pass carried already), and
    for those its parts planned while their clips are pending. Window 2 is listed once: listed
    twice (its parts, then its plan), it had none of those videos' frames carried (0 of 75),
    and a video both held had its frames counted twice against the room to carry."""
    async with carrying(tmp_path, monkeypatch, epochs=6) as (plan, scheduler):
        await jump(scheduler, plan, monkeypatch, window=2)
        book, carry, pending = scheduler.book, scheduler.carry, scheduler.board.pending
        parts, whole = book.windows[2].videos, book.future[2].videos
        later = book.later(1, carry.span)
        assert [index for index, _ in later] == [2] and set(later[0][1]) == set(whole)
        done = carry.frames_on_disk | carry.carried
        due = {p for p in whole if carry.next_pass(p, 1) > 2 and VideoJobKey(2, p) not in done
               and (p not in parts or pending.get(VideoJobKey(2, p)))}
        carried = {p for p in whole if 2 in carry.plan(
            VideoJobKey(1, p), later, busy=set(), pending=pending, active=book.windows,
            memory_room=1 << 30)}
        assert len(due - set(parts)) > len(whole) // 3 and carried == due


async def test_windows_behind_every_reader_and_their_plans_to_carry_for_go_while_one_waits(
        tmp_path, monkeypatch):
    """A reader jumps into window 3, planned in parts, whose rest waits: windows 0 and 1,
    behind every reader, are dropped meanwhile, and so is the plan made to carry for window 2
    (250,000 videos: ~58 MB), which no pass carries for now. Window 3's stays until it is
    whole."""
    async with carrying(tmp_path, monkeypatch, epochs=8) as (plan, scheduler):
        with trio.fail_after(10):
            await until(lambda: 3 in scheduler.book.future)
        await jump(scheduler, plan, monkeypatch, window=3)
        book = scheduler.book
        assert set(book.windows) == {3} and set(book.future) == {3}
        scheduler.planner.idle = lambda: True  # its rest swept
        scheduler.wake()
        with trio.fail_after(10):
            await until(lambda: 3 not in book.rest_pending)
        assert not book.future


async def test_a_window_behind_every_reader_is_dropped_not_finished(tmp_path, monkeypatch):
    """Window 0 waits for its rest when the reader jumps into window 2: window 0 is dropped
    without planning its rest (at 250,000 videos seconds, the tasks held meanwhile), which
    window 2, where the reader stands, waited for."""
    plan, scheduler = two_windows(tmp_path, monkeypatch, epochs=6)
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 0
    planned, plan_active = [], scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        planned.append((window, "rest" if skip and lead is None else "part" if skip
                        else "lead" if lead else "whole"))
        return plan_active(window, lead, skip, tasks)

    scheduler.planner.plan_active = planning
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await read(scheduler, plan, 0)
        with trio.fail_after(10):
            await until(lambda: 0 in scheduler.book.rest_pending)
        assert planned == [(0, "lead")]
        await read(scheduler, plan, 4 * plan.iterations_per_epoch)
        with trio.fail_after(10):
            await until(lambda: 0 not in scheduler.book.windows)
        nursery.cancel_scope.cancel()
    assert [w for w, _ in planned] == [0, 2] and planned[1] == (2, "lead")


async def test_memory_is_given_back_once_a_window_is_whole_and_once_it_is_dropped(
        tmp_path, monkeypatch):
    """A window made whole from its parts, one planned whole at once (its planning's
    transients: ~75 MB at 250,000 videos, beside which the next prune peaked), and one
    dropped behind its readers leave much free in malloc's heaps: given back to the kernel in
    a thread (`runtime.trim_free_memory`), once each; not as the parts are swept, which would
    give back the heap top kept for the next frames and stall the loop's allocations during
    reads."""
    trimmed = []
    plan, scheduler = two_windows(tmp_path, monkeypatch)
    monkeypatch.setattr(trims_module, "trim_free_memory", lambda: trimmed.append(
        (threading.current_thread().name, sorted(scheduler.book.windows))))
    turn = 2 * plan.iterations_per_epoch
    async with trio.open_nursery() as nursery:
        await window_0_whole(scheduler, plan, nursery)
        with trio.fail_after(10):
            await until(lambda: len(trimmed) == 2)
        await trio.sleep(0.1)
        # window 0 whole; window 1 planned whole at once
        assert [windows for _, windows in trimmed] == [[0], [0, 1]]
        await read(scheduler, plan, turn)
        with trio.fail_after(10):
            await until(lambda: 0 not in scheduler.book.windows and len(trimmed) == 3)
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert len(trimmed) == 3 and trimmed[-1][1] == [1]
    assert threading.main_thread().name not in {name for name, _ in trimmed}


async def test_a_jump_dropping_two_windows_gives_memory_back_in_one_trim_at_a_time(
        tmp_path, monkeypatch):
    """A reader jumps from window 0 into window 2: windows 0 and 1 are dropped together, and
    memory is given back once for both; a trim asked for while one runs follows it. A trim
    walks every heap with its lock held: with a thread a dropped window, two ran at once."""
    lock, running, most, trims = threading.Lock(), [0], [0], []

    def trim():
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
            trims.append(time.monotonic())

    monkeypatch.setattr(trims_module, "trim_free_memory", trim)
    plan, scheduler = two_windows(tmp_path, monkeypatch, epochs=6)
    async with trio.open_nursery() as nursery:
        await window_0_whole(scheduler, plan, nursery)
        with trio.fail_after(10):
            await until(lambda: 1 in scheduler.book.windows and trims)
        await read(scheduler, plan, 4 * plan.iterations_per_epoch)  # window 2
        jumped = time.monotonic()
        with trio.fail_after(10):
            await until(lambda: set(scheduler.book.windows) == {2} and trims[-1] > jumped)
        await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    assert most[0] == 1
