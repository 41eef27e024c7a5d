"""The lazy scan's order (sandfs/plan/probeorder.py): the order a task's first window's parts
wait for its videos, each epoch-0 batch's with their batch-mates in the window's other epochs
(docs/contract.md#lazy-scan)."""

from __future__ import annotations

import gc
import select
import threading
import weakref

import pytest

from sandfs.media import probebook
from sandfs.media.probebook import ProbeBook, ProbeQueue
from sandfs.media.scan_workers import BACKGROUND, FRONT, ProbeJob, ScanPace, ScanStopped
from sandfs.media.types import BadVideo, ListedVideo
from sandfs.plan import probeorder
from sandfs.plan.probeorder import reading_order
from tests.helpers.plans import fake_videos, make_plan


def needed_by_batch(plan) -> list[set[str]]:
    """Per epoch-0 batch, what planning its part waits for, from the plan's own batches."""
    epochs = list(plan.window_epochs(plan.window_of(0)))
    batches = {e: [set(plan.batch_slots(e, i)) for i in range(plan.iterations_per_epoch)]
               for e in epochs}
    needed = []
    for own in batches[0]:
        videos = set(own)
        for e in epochs[1:]:
            videos |= set().union(*(b for b in batches[e] if b & own))
        needed.append({plan.listed[i].rel_path for i in videos})
    return needed


@pytest.mark.parametrize(("count", "per", "k_epochs", "step"),
                         [(203, 4, 3, 2), (64, 8, 5, 16), (50, 3, 1, 1)])
def test_each_batch_s_part_comes_whole_before_the_next_batch_s(tmp_path, monkeypatch, count,
                                                               per, k_epochs, step):
    monkeypatch.setattr(probeorder, "BATCHES_PER_STEP", step)
    plan = make_plan(tmp_path, fake_videos(count), k_epochs=k_epochs, epochs=k_epochs + 1,
                     sampling={"videos_per_batch": per})
    order = list(reading_order(plan))
    assert sorted(order) == sorted(v.rel_path for v in plan.listed)  # each once
    place = {rel_path: i for i, rel_path in enumerate(order)}
    so_far: set[str] = set()
    for needed in needed_by_batch(plan):
        so_far |= needed
        # batch b's part and every one before it are exactly the order's first videos
        assert max(place[r] for r in so_far) == len(so_far) - 1


def test_orders_followed_are_taken_in_turn_lazily(tmp_path):
    jobs = [ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(8)]
    queue = ProbeQueue(jobs)
    queue.FOLLOW_CHUNK = 2
    taken: list[str] = []

    def lazy(keys):
        for key in keys:
            taken.append(key)
            yield key

    queue.follow(lazy(["v7", "v6", "v5"]))
    queue.follow(lazy(["v0", "v1"]))
    assert taken == []  # nothing made before the scan takes it
    assert [queue.take().key for _ in range(8)] == ["v7", "v6", "v0", "v1", "v5", "v2",
                                                      "v3", "v4"]


def test_a_front_worker_takes_the_followed_order_only_once_a_wait_found_it_behind():
    jobs = [ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(8)]
    queue = ProbeQueue(jobs, ahead_videos=2)
    queue.follow(["v5", "v4", "v3"])
    assert queue.take(FRONT) is None  # the readers wait for nothing: a background job
    assert queue.take().key == "v5"
    queue.first(["v5"])  # probed already: not behind
    assert queue.take(FRONT) is None
    queue.first(["v1"])  # waited for, not probed: behind, 2 ahead
    assert [queue.take(FRONT).key for _ in range(3)] == ["v1", "v4", "v3"]
    assert queue.take(FRONT) is None  # the order followed is done; the rest by name
    assert [queue.take().key for _ in range(4)] == ["v0", "v2", "v6", "v7"]
    assert queue.take() is None and not queue


def poked(queue: ProbeQueue) -> bool:
    """The queue's waker is readable (the scan's wait returns), drained."""
    readable = bool(select.select([queue.waker], [], [], 0)[0])
    queue.waker.drain()
    return readable


def test_a_background_worker_never_takes_a_job_waited_for():
    queue = ProbeQueue([ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(4)])
    try:
        queue.first(["v2"])
        assert poked(queue)
        assert [queue.take(BACKGROUND).key for _ in range(3)] == ["v0", "v1", "v3"]
        assert queue.take(BACKGROUND) is None
        assert queue.take(FRONT).key == "v2"
    finally:
        queue.close()


def test_a_wanted_job_in_a_background_pipe_goes_to_a_front_worker_too():
    """Sent to the niced worker, then waited for: the lead is set, the scan woken, and a front
    worker probes it too; once a result came, neither copy is sent again."""
    queue = ProbeQueue([ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(4)],
                       ahead_videos=1)
    try:
        queue.follow(["v3", "v2"])
        assert queue.take(BACKGROUND).key == "v3"
        assert queue.take(FRONT) is None and not poked(queue)
        queue.first(["v3"])
        assert poked(queue)
        assert [queue.take(FRONT).key for _ in range(2)] == ["v3", "v2"]  # then the lead
        queue.first(["v3"])  # with a front worker too now: not sent a third time
        assert queue.take(FRONT) is None and not poked(queue)
        assert queue.take(BACKGROUND).key == "v0"
        queue.first(["v0"])
        assert poked(queue)
        queue.settled("v0")  # a result came first: the copy is not sent
        assert queue.take(FRONT) is None
    finally:
        queue.close()


def test_unpaced_front_workers_take_every_job():
    """A blocking scan (ProbeBook.wait_all) waits for every result: front workers take all."""
    queue = ProbeQueue([ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(3)])
    try:
        assert queue.take(FRONT) is None
        queue.unpace()
        assert poked(queue)
        assert [queue.take(FRONT).key for _ in range(3)] == ["v0", "v1", "v2"]
    finally:
        queue.close()


def test_waiting_for_every_result_unpaces_the_scan():
    """`short_video: skip` waits for the whole scan before serving: every job is a front
    worker's from then on, none left to the niced one alone."""
    stop = threading.Event()
    stop.set()
    queue = ProbeQueue([ProbeJob("v0", "/d/v0", (0, 0))])
    book = ProbeBook([ListedVideo("v0", "v0", "/d/v0", 1, 0)], queue=queue)
    try:
        with pytest.raises(ScanStopped):
            book.wait_all(stop)
        assert queue.take(FRONT).key == "v0"
    finally:
        queue.close()


def test_the_background_holds_while_a_reader_waits_the_front_does_not():
    """A reader blocked on a batch: the niced worker takes nothing (its results cost the GIL
    the reader's jobs want), a front worker still takes what is waited for and the lead; an
    unpaced scan (every result waited for) holds nothing."""
    queue = ProbeQueue([ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(6)],
                       ahead_videos=1)
    book = ProbeBook([], queue=queue)
    try:
        queue.follow(["v4", "v3"])
        with book.readers_wait(), book.readers_wait():
            assert queue.take(BACKGROUND) is None
            queue.first(["v5"])
            assert [queue.take(FRONT).key for _ in range(2)] == ["v5", "v4"]
        assert queue.take(BACKGROUND).key == "v3"
        with book.readers_wait():
            assert queue.take(BACKGROUND) is None
            queue.unpace()
            assert queue.take(BACKGROUND).key == "v0"
    finally:
        queue.close()


def test_a_plan_without_a_scan_going_on_has_nothing_to_hold():
    with ProbeBook.of([]).readers_wait():
        pass


def test_results_are_frozen_out_of_the_collector_s_walks_as_they_come(monkeypatch):
    """Once SETTLE_FIRST results are recorded, then at each doubling, what is alive is
    frozen: a full collection does not walk a large dataset's results again and again (0.5 s
    each at 250,000 videos)."""
    monkeypatch.setattr(probebook, "SETTLE_FIRST", 3)
    book = ProbeBook([ListedVideo(f"v{i}", f"v{i}", f"/d/v{i}", 1, 0) for i in range(12)])
    frozen = []
    monkeypatch.setattr(probebook, "settle_collector",
                        lambda collect: frozen.append((book.probed, collect)))
    for i in range(12):
        book.record(f"v{i}", BadVideo(f"v{i}", "open_invalid", "x"))
    assert frozen == [(3, True), (6, True), (12, True)]


class _Cycle:
    def __init__(self) -> None:
        self.me, self.buffer = self, bytearray(1 << 20)


def test_a_garbage_cycle_left_before_results_are_frozen_is_not_kept(monkeypatch):
    """A freeze keeps what the collector has not freed yet until a task ends: a dead cycle
    left by anything (8 MB each) would be held for good."""
    monkeypatch.setattr(probebook, "SETTLE_FIRST", 1)
    book = ProbeBook([ListedVideo("v0", "v0", "/d/v0", 1, 0)])
    gc.unfreeze()
    try:
        gc.collect()
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        del cycle
        book.record("v0", BadVideo("v0", "open_invalid", "x"))
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert alive() is None
    finally:
        gc.unfreeze()


def test_the_last_reader_out_wakes_the_scan_s_thread():
    """A reader bound by decoding leaves the background gaps of 10-20 ms between its waits:
    the scan's thread, polling every 0.2 s, missed nearly all of them."""
    queue = ProbeQueue([ProbeJob("v0", "/d/v0", (0, 0))])
    try:
        with queue.readers_wait():
            with queue.readers_wait():
                pass
            assert select.select([queue.waker], [], [], 0)[0] == []
        assert select.select([queue.waker], [], [], 0)[0] == [queue.waker]
    finally:
        queue.close()


@pytest.fixture
def now(monkeypatch) -> list[float]:
    """The probe book's clock, moved by hand."""
    clock = [100.0]
    monkeypatch.setattr(probebook.time, "monotonic", lambda: clock[0])
    return clock


def held_queue(videos: int, *, held_jobs: int) -> ProbeQueue:
    """A queue whose background takes `held_jobs` every 0.5 s while held."""
    return ProbeQueue([ProbeJob(f"v{i}", f"/d/v{i}", (0, i)) for i in range(videos)],
                      held_every_s=0.5, held_jobs=held_jobs)


def test_while_held_the_background_takes_a_share_at_most_every_interval(now):
    queue = held_queue(6, held_jobs=2)
    try:
        assert queue.held_seconds(room=True) == float("inf")
        with queue.readers_wait():
            assert queue.take(BACKGROUND) is None and queue.held_seconds(room=True) == 0.5
            assert queue.held_seconds(room=False) == float("inf")  # its reply wakes the scan
            now[0] += 0.5
            assert [queue.take(BACKGROUND).key for _ in range(2)] == ["v0", "v1"]
            assert queue.take(BACKGROUND) is None and queue.held_seconds(room=True) == 0.5
            now[0] += 0.25
            assert queue.take(BACKGROUND) is None and queue.held_seconds(room=True) == 0.25
        assert queue.take(BACKGROUND).key == "v2"  # not held: any
    finally:
        queue.close()


def test_a_held_share_s_slot_is_spent_only_on_a_job(now):
    """A slot that found no background job (those left are waited for) is kept, and the
    scan's thread is not told to come back at once for it."""
    queue = held_queue(3, held_jobs=1)
    try:
        with queue.readers_wait():
            queue.first(["v0", "v1"])
            now[0] += 0.5
            assert queue.take(BACKGROUND).key == "v2"
            now[0] += 0.5
            assert queue.take(BACKGROUND) is None  # v0, v1: a front worker's
            assert queue._held_left == 1  # kept: spent, the next share would be in 0.5 s
            assert queue.held_seconds(room=True) == float("inf")  # no job: nothing to poll for
    finally:
        queue.close()


def test_a_hold_starts_with_no_slots_left_from_the_last(now):
    queue = held_queue(6, held_jobs=2)
    try:
        with queue.readers_wait():
            now[0] += 0.5
            assert queue.take(BACKGROUND).key == "v0"  # one slot of two spent
        with queue.readers_wait():  # at once: the share's next slots are 0.5 s away
            assert queue.take(BACKGROUND) is None
            now[0] += 0.5
            assert [queue.take(BACKGROUND).key for _ in range(2)] == ["v1", "v2"]
    finally:
        queue.close()


def test_a_held_every_ms_past_a_float_s_range_turns_the_share_off():
    held_every_s = ScanPace(held_every_ms=10**400).held_every_s  # a valid integer in YAML
    assert held_every_s == float("inf")
    queue = ProbeQueue([ProbeJob("v0", "/d/v0", (0, 0))], held_every_s=held_every_s)
    try:
        with queue.readers_wait():
            assert queue.take(BACKGROUND) is None
            assert queue.held_seconds(room=True) == float("inf")
        assert queue.take(BACKGROUND).key == "v0"
    finally:
        queue.close()
