"""What the board holds for every batch and video of its windows, before any job runs: no set
per batch whose slots are all still to make, no record per video that keeps nothing on disk,
and a batch's jobs as a short list; a cold window's pending clips are its videos' own lists, and
a warm one's too for a video with nothing on disk."""

from __future__ import annotations

import gc

import numpy as np

from sandfs.plan.uses import Uses, WindowUses
from sandfs.plan.window import plan_window
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.objects import (
    PRUNE_TARGET_FRACTION,
    Spot,
    clip_nbytes,
    clip_object_key,
)
from sandfs.sched.urgency import UrgencyOrder
from sandfs.sched.viewstate import NO_SLOTS
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import PlanStore, fake_videos, make_plan


def test_a_window_s_untouched_batches_and_videos_hold_no_sets(tmp_path):
    plan = make_plan(tmp_path, fake_videos(40), epochs=4, sampling={"samples_per_video": 2})
    whole = work.plan_active_window([plan], 0, None, "leaves").plan
    some = next(iter(next(iter(whole.videos.values())).uses))
    room = 3 * clip_nbytes(plan, some)  # a few clips fit: most videos keep none
    store = PlanStore(int(room / PRUNE_TARGET_FRACTION) + 1)
    planned = work.plan_active_window([plan], 0, store, "leaves")
    board = BatchBoard()
    board.add_window(planned)
    kept = {j.path for j in board.disk_plans}  # the jobs that keep a clip, and only those
    assert kept == set(planned.disk_plans)  # no plan made for a video that keeps nothing
    assert 0 < len(kept) < len(whole.videos)
    assert all(d.clips for d in planned.disk_plans.values())
    assert not list(board.views.held()) and len(board.views) == len(whole.views)  # no state
    assert all(board.views.get(key) is None for key in whole.views)  # a look makes none
    assert not list(board.views.held())
    states = [board.views.state(key) for key in whole.views]  # as jobs take them
    assert all(s.on_disk is NO_SLOTS and s.in_memory is NO_SLOTS for s in states)
    jobs = {view: board.urgency.jobs_of(view) for view in whole.views}
    assert all(jobs.values()) and all(len(set(j)) == len(j) for j in jobs.values())
    assert {v: set(j) for v, j in jobs.items()} == {
        v: {job for job, uses in board.pending.items() for u in uses if u.view == v}
        for v in jobs}


def test_a_batch_s_slots_are_kept_as_they_come(tmp_path):
    plan = make_plan(tmp_path, fake_videos(8), epochs=2)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    board = BatchBoard()
    board.add_window(planned)
    key = next(iter(board.views))
    state = board.views.state(key)
    state.add_on_disk(())
    assert state.on_disk is NO_SLOTS  # nothing came
    state.add_on_disk([1])
    state.add_in_memory(0)
    state.add_in_memory(1)
    state.add_on_disk([0, 1])
    assert (state.on_disk, state.in_memory) == ({0, 1}, {0, 1})
    assert board.state_of(key) in ("materializing", "ready")


def test_pending_clips_are_the_window_s_own_lists_and_leave_them_as_they_are(tmp_path):
    """A cold window's pending clips are its videos' `uses`, not copies (23 bytes a clip); the
    board replaces a job's sequence when clips come or go (tuples and `Uses` cannot be
    changed in place), so the window keeps its clips whatever the board does."""
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    board = BatchBoard()
    board.add_window(planned)
    videos = planned.plan.videos
    before = {path: video.uses for path, video in videos.items()}
    job, uses = next(iter(board.pending.items()))
    assert uses == videos[job.path].uses
    # no key a video: urgency's order and the board's pending clips hold numbers, a key is
    # made when asked for, its number in it (92 bytes a video more, before)
    assert all(order[1].dtype == np.int64 for order in board.urgency._order.values())
    assert all(board.pending.key_of(key.number) == key for key in board.pending)
    board.add_pending(job, uses[0])  # made, not kept: pending again
    board.take_pending(job, uses[:1])
    other = next(j for j in board.pending if j != job)
    board.add_window(work.plan_active_window([plan], 0, None, "leaves"))  # grown, not changed
    assert len(board.pending[other]) == 2 * len(before[other.path])
    assert {path: video.uses for path, video in videos.items()} == before
    assert all(type(uses) in (tuple, Uses, WindowUses) for uses in board.pending.values())


def test_a_warm_batch_keeps_the_planner_s_set_of_its_slots_on_disk(tmp_path):
    """A batch with slots on disk when its window is planned holds the planner's frozenset,
    not a copy of it; a slot that comes later makes its own set."""
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    cold = work.plan_active_window([plan], 0, None, "leaves").plan
    video = next(iter(cold.videos.values()))
    use = video.uses[0]
    kept = frozenset({clip_object_key(use, video.info)})
    planned = work.plan_active_window([plan], 0, PlanStore(1 << 30, kept), "leaves")
    board = BatchBoard()
    board.add_window(planned)
    assert [key for key, _ in board.views.held()] == [use.view]  # the one with a slot on disk
    state = board.views[use.view]
    assert state.on_disk is planned.on_disk[use.view] == {use.slot}
    state.add_on_disk([use.slot + 1])
    assert state.on_disk == {use.slot, use.slot + 1} and planned.on_disk[use.view] == {use.slot}


def test_a_warm_window_s_videos_with_nothing_on_disk_pend_their_own_lists(tmp_path):
    """Once the store holds an object, a video none of whose clips is on disk still pends its
    own `uses` list; only a video with a clip on disk gets a list of the rest."""
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    cold = work.plan_active_window([plan], 0, None, "leaves").plan
    path, video = next(iter(cold.videos.items()))
    kept = frozenset({clip_object_key(video.uses[0], video.info)})
    planned = work.plan_active_window([plan], 0, PlanStore(1 << 30, kept), "leaves")
    videos = planned.plan.videos
    assert planned.pending[path] == videos[path].uses[1:]
    assert all(planned.pending[p] == v.uses for p, v in videos.items() if p != path)


def test_a_joining_task_s_clips_pend_once_and_leave_with_it(tmp_path):
    """A task joining a cold window: its clips are added to the videos' lists (replaced, not
    grown in place, as the board pends those very lists) and pend once each; removed, the
    window's lists are what they were and the board pends only the first task's clips."""
    for name in "ab":
        (tmp_path / name).mkdir()
    first = make_plan(tmp_path / "a", fake_videos(12), task="a", epochs=4)
    joined = make_plan(tmp_path / "b", fake_videos(12), task="b", epochs=4, seed=3)
    book, board = WindowBook([first]), BatchBoard()
    planned = work.plan_active_window([first], 0, None, "leaves")
    book.add_window(planned.plan)
    board.add_window(planned)
    window = book.windows[0]
    before = {path: video.uses for path, video in window.videos.items()}
    book.add_task(joined)
    merged = book.merge(0, plan_window([joined], 0))
    board.add_part(0, merged, frozenset())
    assert merged.uses and merged.new_views
    # its pending clips stay columns, the window's rows and the part's, no record made a clip
    assert all(isinstance(board.pending[VideoJobKey(0, path)], Uses) for path in merged.uses)
    for path, video in window.videos.items():
        assert video.uses == before.get(path, ()) + merged.uses.get(path, ())
        spots = [Spot.of(u) for u in board.pending[VideoJobKey(0, path)]]
        assert len(set(spots)) == len(spots) == len(video.uses)
    released = book.remove_task("b")
    board.forget_pending(set(released))
    assert set(released) == set(merged.new_views)
    assert {path: v.uses for path, v in window.videos.items() if v.uses} == before
    assert {job.path: uses for job, uses in board.pending.items() if uses} == before
    assert all(type(uses) in (tuple, Uses, WindowUses) for uses in board.pending.values())


def test_a_window_is_added_to_the_board_with_the_collector_paused(tmp_path, monkeypatch):
    """Not frozen out of the collector's walks yet, a window of 100,000 videos made the walks
    triggered by the board's own allocations take 1.6 of the 2.1 s it took to add."""
    plan = make_plan(tmp_path, fake_videos(8), epochs=2)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    seen, add_entries = [], UrgencyOrder.add_entries

    def recording(*args):
        seen.append(gc.isenabled())
        return add_entries(*args)

    monkeypatch.setattr(UrgencyOrder, "add_entries", recording)
    assert gc.isenabled()
    BatchBoard().add_window(planned)
    assert seen and not any(seen) and gc.isenabled()


def test_a_settled_window_leaves_the_collector_nothing_young_to_walk(tmp_path):
    """Made with the collector paused, a window's objects all wait in its youngest generation:
    the first collection after planning, on whichever thread allocated next, walked them all
    (1.3-1.9 s at 100,000 videos). Settled in its planning thread, they are frozen first."""
    plan = make_plan(tmp_path, fake_videos(40), epochs=4, sampling={"samples_per_video": 2})
    gc.collect()
    frozen = gc.get_freeze_count()
    try:
        planned = work.plan_active_window([plan], 0, None, "leaves", settle=True)
        young = gc.get_count()[0]
        assert gc.get_freeze_count() - frozen > sum(len(w.uses) for w in
                                                    planned.plan.videos.values())
        assert young < 100 and gc.isenabled()
    finally:
        gc.unfreeze()
