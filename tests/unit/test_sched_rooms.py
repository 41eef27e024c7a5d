"""The scheduler's rooms on their own: the batch board (states, eviction order), the carry book
(accounting), the window book (positions), single flight, frozen job records, settings."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from types import SimpleNamespace

import pytest
import trio

from sandfs.plan.window import ClipUse, ViewKey, plan_window, view_key
from sandfs.sched.board import BatchBoard, ReadyView, ViewState
from sandfs.sched.carry import CarryBook
from sandfs.sched.flights import Flights, ObjectFailed
from sandfs.sched.jobs import AssemblyJob, JobResult, Placed, VideoJob, VideoJobKey
from sandfs.sched.objects import PRUNE_TARGET_FRACTION, Spot, clip_nbytes
from sandfs.sched.pruning import disk_plans, pruned_plans
from sandfs.sched.scheduler import Scheduler
from sandfs.sched.windows import Position, WindowBook
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan


def key(i: int) -> ViewKey:
    return ViewKey("plan", 0, i)


def board_with_ready(count: int, *, read: set[int] = frozenset(), nbytes: int = 10) -> BatchBoard:
    board = BatchBoard()
    for i in range(count):
        board.ready[key(i)] = ReadyView(bytearray(nbytes), set() if i in read else {"t"})
    return board


def test_eviction_drops_read_batches_oldest_first_before_any_unread():
    board = board_with_ready(6, read={1, 4})
    freed, unread = board.evict(15, keep=key(0), deadline=0, deadline_of=lambda k: k.iteration)
    assert (freed, unread) == (20, [])  # both read ones, never an unread one
    assert list(board.ready) == [key(0), key(2), key(3), key(5)]
    assert board.evicted_unread == 0


def test_eviction_of_unread_batches_goes_latest_needed_first_and_never_sooner():
    board = board_with_ready(6)
    freed, unread = board.evict(25, keep=key(2), deadline=2, deadline_of=lambda k: k.iteration)
    assert (freed, unread) == (30, [key(5), key(4), key(3)])
    freed, unread = board.evict(100, keep=key(0), deadline=0, deadline_of=lambda k: k.iteration)
    assert unread == [key(2), key(1)]  # batch 0 is the one that needs the room
    assert list(board.ready) == [key(0)] and board.evicted_unread == 5


def test_board_states_and_failures_wake_waiters(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=2)
    board = BatchBoard()
    k = view_key(plan, 0, 0)
    assert board.state_of(k) == "planned" and not board.is_planned(k)
    state = ViewState.planned(plan, 0, 0)
    board.plan(k, state)
    assert board.is_planned(k) and board.state_of(k) == "planned"
    state.add_on_disk([0])
    assert board.state_of(k) == "materializing"
    state.add_on_disk(range(state.slots))
    assert board.state_of(k) == "ready"  # complete on disk
    event = board.flights.event(k)
    board.fail(k, "DecodeError: broken")
    assert event.is_set() and board.state_of(k) == "failed" and not board.is_planned(k)
    with pytest.raises(ObjectFailed, match="broken"):
        board.flights.check(k)


def test_a_batch_is_offered_for_reading_back_once_every_slot_is_made(tmp_path):
    """A batch whose clips are on disk is read back into memory (an assembly job) only when no
    slot still waits for a video job. The board keeps the batches that qualify as slots come in
    and as batches leave, instead of walking every batch at each dispatch."""
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=2)
    work = next(iter(plan_window([plan], 0).videos.values()))
    board = BatchBoard()
    k = view_key(plan, 0, 0)
    state = ViewState.planned(plan, 0, 0)
    board.plan(k, state)
    uses = [ClipUse(k, slot, clip, ()) for slot, clip in enumerate(state.view.clips)]
    job = VideoJob(VideoJobKey(0, work.info.path), work, tuple(uses), frozenset(), frozenset(),
                   False, False, 0, {}, {}, {}, {k: state})

    def made_on_disk(slots) -> None:
        board.record(job, JobResult(tuple(Placed(uses[s], False, True) for s in slots)))

    def offered() -> list[ViewKey]:
        return [v for _, v in board.job_states(set(), lambda v: 0, 16) if v == k]

    made_on_disk(range(len(uses) - 1))
    assert offered() == [] and board.covered == set()
    made_on_disk([len(uses) - 1])
    assert offered() == [k] and board.covered == {k}
    assert [v for _, v in board.job_states({k}, lambda v: 0, 16)] == []  # busy: not twice
    board.drop(k)
    assert offered() == [] and board.covered == set()
    again = ViewState.planned(plan, 0, 0)
    board.plan(k, again, on_disk=range(again.slots))  # planned again, every clip on disk
    assert offered() == [k]
    board.fail(k, "DecodeError: broken")
    assert offered() == [] and board.covered == set()


async def test_flights_settle_every_waiter_once():
    flights = Flights()
    woke = []

    async def waiter(name):
        await flights.event("k").wait()
        woke.append(name)

    async with trio.open_nursery() as nursery:
        for name in "ab":
            nursery.start_soon(waiter, name)
        await trio.testing.wait_all_tasks_blocked()
        assert flights.in_flight("k")
        flights.settle("k")
    assert sorted(woke) == ["a", "b"] and not flights.in_flight("k")
    flights.settle("k")  # nobody waits: nothing happens


class Room:
    """A store stand-in that answers how much room carrying may use."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def room_below(self, fraction: float) -> int:
        return self.nbytes


PLENTY = 1 << 40  # of memory


def carry_setup(tmp_path, room: int):
    """A carry book with `room` to carry, windows 1 to 3's videos (`WindowBook.later`'s), their
    plans, a video's path and the bytes of its frames in window 1."""
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=8)
    plans = {w: plan_window([plan], w) for w in range(1, 4)}
    path = next(iter(plans[1].videos))
    frames = 64 * 48 * 3 * len(plans[1].videos[path].frame_keys)
    later = [(w, p.videos) for w, p in plans.items()]
    book = CarryBook(Room(room), memory_limit_bytes=1 << 40, decode_ahead=3)
    return book, later, plans, path, frames


def test_carry_book_plans_what_fits_and_skips_windows_served_already(tmp_path):
    book, later, plans, path, one_window = carry_setup(tmp_path, 1 << 30)
    job_key = VideoJobKey(0, path)
    carry = book.plan(job_key, later, busy=set(), pending={}, active={}, memory_room=PLENTY)
    assert sorted(carry) == [1, 2, 3]
    assert carry[1].keys == frozenset(plans[1].videos[path].frame_keys)
    book.frames_on_disk.add(VideoJobKey(2, path))
    carry = book.plan(job_key, later, busy={VideoJobKey(3, path)}, pending={}, active={},
                      memory_room=PLENTY)
    assert sorted(carry) == [1]  # 2 is on disk already, 3 has a job of its own running
    assert book.plan(job_key, later, busy=set(), pending={}, active={1: plans[1]},
                     memory_room=PLENTY).keys() == {3}  # window 1's clips of it are all made
    in_parts = SimpleNamespace(videos={})  # active, its parts have not planned the video yet
    assert book.plan(job_key, later, busy=set(), pending={}, active={1: in_parts},
                     memory_room=PLENTY).keys() == {1, 3}
    assert sorted(book.plan(job_key, later, busy=set(), pending={}, active={},
                            memory_room=one_window)) == [1]  # the memory free now
    assert book.plan(job_key, later, busy=set(), pending={}, active={}, memory_room=-1) == {}
    book, later, _, path, one_window = carry_setup(tmp_path, one_window)
    assert sorted(book.plan(job_key, later, busy=set(), pending={}, active={},
                            memory_room=PLENTY)) == [1]


def test_carry_book_accounts_claims_and_frames_on_disk(tmp_path):
    book, later, plans, path, _ = carry_setup(tmp_path, 1 << 30)
    job_key = VideoJobKey(0, path)
    carry = book.plan(job_key, later, busy=set(), pending={}, active={}, memory_room=PLENTY)
    job = VideoJob(job_key, plans[1].videos[path], (), frozenset(), frozenset(), False, False,
                   0, carry, {}, {}, {})
    book.claim(job)
    assert book.carried == {VideoJobKey(w, path) for w in (1, 2, 3)}
    assert book.plan(job_key, later, busy=set(), pending={}, active={}, memory_room=PLENTY) == {}
    book.release(job)
    assert book.carried == set()
    book.note_on_disk([VideoJobKey(1, path), VideoJobKey(9, path)], planned={1, 2})
    assert book.frames_on_disk == {VideoJobKey(1, path)}  # window 9 is planned no more
    book.forget({1})
    assert book.frames_on_disk == set()
    assert CarryBook(None, memory_limit_bytes=1, decode_ahead=3).plan(
        job_key, later, busy=set(), pending={}, active={}, memory_room=PLENTY) == {}


def test_job_records_and_keys_are_frozen(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=2)
    window = plan_window([plan], 0)
    work = next(iter(window.videos.values()))
    use = work.uses[0]
    video = VideoJob(VideoJobKey(0, work.info.path), work, tuple(work.uses),
                     frozenset({Spot.of(use)}), frozenset(), False, False, 0, {}, {}, {}, {})
    assembly = AssemblyJob(use.view, plan, plan.view_plan(0, 0), (0,), {})
    result = JobResult((Placed(use, True, False),))
    for record, field in [(video, "uses"), (assembly, "slots"), (result, "placed"),
                          (result.placed[0], "on_disk"), (video.key, "window"),
                          (Spot.of(use), "slot"), (use.view, "epoch")]:
        # a batch's key is a named tuple: its fields cannot be set either
        with pytest.raises((dataclasses.FrozenInstanceError, AttributeError)):
            setattr(record, field, None)
    assert video.views == {u.view for u in work.uses} and assembly.views == {use.view}


def test_window_book_position_is_where_the_task_stands(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=4)
    book = WindowBook([plan])
    assert book.position(plan.name) == Position(0, 0)
    book.opened(plan.name, 2, 1, moves=True)
    assert book.position(plan.name) == Position(2, 1)
    book.opened(plan.name, 0, 0, moves=False)  # a re-read behind it
    assert book.position(plan.name) == Position(2, 1)
    assert set(book.open_positions[plan.name]) == {2 * plan.iterations_per_epoch + 1, 0}
    book.released(plan.name, 0, 0)
    assert set(book.open_positions[plan.name]) == {2 * plan.iterations_per_epoch + 1}


@pytest.mark.parametrize(("setting", "value"), [("policy", "lifo"), ("prune_mode", "all")])
def test_scheduler_rejects_unknown_settings(tmp_path, setting, value):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=2)
    with pytest.raises(ValueError, match=f"got '{value}'"):
        Scheduler([plan], object(), Stats(), workers=1, memory_limit_bytes=1 << 20,
                  limiter=trio.CapacityLimiter(1), **{setting: value})


def test_the_index_planner_does_not_import_the_decoder():
    code = "import sys, sandfs.media.gop, sandfs.plan.report; print('av' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_spot_is_a_clip_use_s_batch_and_slot():
    use = ClipUse(key(3), 5, None, ())
    assert Spot.of(use) == Spot(key(3), 5)
    assert key(3).parts == ("view", "plan", 0, 3)  # what on-disk clip keys digest


def test_where_every_clip_fits_disk_plans_keep_what_algorithm_1_keeps(tmp_path):
    """Algorithm 1 starts from every final clip kept and stops at once when they fit: the
    shortcut that skips building its graphs must keep the same."""
    window = plan_window([make_plan(tmp_path)], 0)
    clips = sum(clip_nbytes(window.views[u.view][0], u)
                for work in window.videos.values() for u in work.uses)
    budget = int(clips / PRUNE_TARGET_FRACTION) + 1
    kept = disk_plans(window, budget, "algorithm1")
    assert kept == pruned_plans(window, int(budget * PRUNE_TARGET_FRACTION))
    assert all(plan.clips and not plan.frames for plan in kept.values())
    tight = disk_plans(window, budget // 2, "algorithm1")  # pruned: fewer bytes kept
    assert tight == pruned_plans(window, int(budget // 2 * PRUNE_TARGET_FRACTION)) != kept


def test_pruning_asks_for_its_turn_between_chunks_of_videos(tmp_path, monkeypatch):
    """The planner holds pruning back while it plans (`wait_turn`, before each chunk of videos
    is read and between the walk's passes): a chunk a turn, here a video."""
    from sandfs.sched import pruning

    window = plan_window([make_plan(tmp_path)], 0)
    events = []
    monkeypatch.setattr(pruning, "_CHUNK", 1)
    rows_of = pruning.chunk_rows
    monkeypatch.setattr(pruning, "chunk_rows",
                        lambda *read: events.append("video") or rows_of(*read))
    for room in (0, 1 << 40):
        events.clear()
        pruned_plans(window, room, lambda: events.append("turn"))
        assert events.count("video") == len(window.videos)
        assert all(events[i - 1] == "turn" for i, e in enumerate(events) if e == "video")
