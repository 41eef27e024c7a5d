"""The board's pending clips as the window's columns less what was taken (`PendingClips`) read
as the dict of sequences they replaced, through a seeded random run of what changes them
(windows added whole or in up to six parts, cold and warm, and added twice; a task joining;
clips taken by the board's keys and by keys made elsewhere, pending again, forgotten; windows
dropped), and the urgency order answers as one the board drove over the dict, and
as brute force over the clips left."""

from __future__ import annotations

import random

import pytest

from sandfs.plan.uses import kept, selected
from sandfs.plan.window import plan_window
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.pending import PendingClips, PendingColumns, job_number
from sandfs.sched.urgency import UrgencyOrder, urgency_entries
from sandfs.sched.windows import Merged
from tests.helpers.plans import SomeOnDisk, fake_videos, make_plan
from tests.helpers.urgency_reference import soonest_jobs


class DictPending:
    """The board's pending clips as a dict of tuples, changed as the board changed it before
    they were columns: the reference."""

    def __init__(self) -> None:
        self.pending: dict[VideoJobKey, tuple] = {}
        self.urgency = UrgencyOrder()  # driven as the board drives its own

    def add_window(self, planned, ready: set) -> None:
        self.urgency.add_entries(planned.urgency, self.pending)
        on_disk = {(k, s) for k, slots in planned.on_disk.items() for s in slots}
        for path, video in planned.plan.videos.items():
            job = VideoJobKey(planned.plan.window, path)
            uses = tuple(u for u in video.uses
                         if (u.view, u.slot) not in on_disk and u.view not in ready)
            if uses:
                self.pending[job] = self.pending.get(job, ()) + uses

    def add_part(self, window, merged) -> None:
        added = []
        for path, uses in merged.uses.items():
            job = VideoJobKey(window, path)
            self.pending[job] = self.pending.get(job, ()) + tuple(uses)
            added.extend((job, use) for use in uses)
        self.urgency.add_many(added, self.pending)

    def take(self, job, uses) -> None:
        spots = {(u.view, u.slot) for u in uses}
        self.pending[job] = tuple(u for u in self.pending[job] if (u.view, u.slot) not in spots)

    def add(self, job, use) -> None:
        self.pending[job] = (*self.pending.get(job, ()), use)
        self.urgency.add(job, use)

    def forget(self, views) -> None:
        for job, uses in self.pending.items():
            self.pending[job] = tuple(u for u in uses if u.view not in views)

    def drop_window(self, window, views) -> None:
        for job in [j for j in self.pending if j.window == window]:
            del self.pending[job]
        self.urgency.forget_window(window, views)

    def left(self) -> dict:
        return {job: uses for job, uses in self.pending.items() if uses}


def same(board: BatchBoard, reference: DictPending) -> None:
    pending, expected = board.pending, reference.left()
    found = {job: tuple(uses) for job, uses in pending.items()}
    assert {j: u for j, u in found.items() if u} == expected
    assert all(pending.has(job) for job in expected)
    assert all(pending.get(job, ()) == () for job in reference.pending if job not in expected)
    assert set(board.pending_jobs()) == set(expected)
    assert board.pending_count() == len(expected) and len(pending) == len(list(pending))
    for busy in (set(), set(list(expected)[:3])):
        urgent = board.urgency.urgent(pending, busy)
        assert urgent == reference.urgency.urgent(reference.pending, busy)
        # as brute force over the clips left: no job ranked at a clip gone
        assert urgent == soonest_jobs(reference.pending, busy, board.urgency.per_task)
    for view in list(board.views)[::5]:
        assert board.urgency.of_views({view}, pending) == reference.urgency.of_views(
            {view}, reference.pending)
    for job in list(expected)[::3]:  # a key made elsewhere: found by its path
        assert pending.get(VideoJobKey(job.window, job.path)) == pending[job]
    for job in list(expected)[:4]:  # the memo of a job's work is that of its clips now
        uses = pending[job]
        remaining, _ = board._work_of(job, uses)
        assert remaining == len({i for u in uses for i in u.clip.frame_indices}) + len(uses)


def two_plans(tmp_path, names: str = "ab"):
    videos = fake_videos(30)
    for name in names:
        (tmp_path / name).mkdir()
    return [make_plan(tmp_path / name, videos=videos, task=name, epochs=6, k_epochs=2,
                      seed=seed) for name, seed in zip(names, (0, 5, 9), strict=False)]


def in_parts(rng, paths: list[str]) -> list[dict]:
    """A window's parts: whole, or a lead part, up to four more, and the rest."""
    count = rng.choice([1, 2, 4, 6])
    cuts = sorted(rng.sample(range(1, len(paths)), count - 1))
    parts, done = [], frozenset()
    for start, end in zip([0, *cuts], cuts, strict=False):
        parts.append({"lead": frozenset(paths[start:end]), "skip": done})
        done |= parts[-1]["lead"]
    return [*parts, {"skip": done}] if count > 1 else [{}]


def joining(board: BatchBoard, plan, window: int) -> Merged:
    """A task joining an active window: its batches none planned (`WindowBook.merge`)."""
    part = plan_window([plan], window)
    new = {key: view for key, view in part.views.items() if not board.is_planned(key)}
    uses = {path: kept(work.uses, new.__contains__) for path, work in part.videos.items()}
    return Merged(new, {}, {path: mine for path, mine in uses.items() if mine},
                  {key: part.view_plans[key] for key in new if key in part.view_plans})


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_changes_read_as_the_dict_they_replace(tmp_path, seed):
    rng = random.Random(seed)
    *plans, joiner = two_plans(tmp_path, "abc")
    board, reference = BatchBoard(), DictPending()
    windows: dict[int, object] = {}
    taken: list = []  # (job, use) taken, to be pending again
    joined: dict[int, list] = {}  # a joining task's batches, by window: dropped with it
    for _ in range(40):
        step = rng.choice(["window", "take", "take", "again", "forget", "drop", "twice",
                           "join"])
        jobs = list(reference.left())
        if step == "window" and len(windows) < 3:
            window = max(windows, default=-1) + 1
            store = SomeOnDisk() if rng.random() < 0.5 else None
            paths = [video.path for video in plans[0].listed]
            rng.shuffle(paths)
            for part in in_parts(rng, paths):
                planned = work.plan_active_window(plans, window, store, "leaves", **part)
                assert isinstance(planned.pending, PendingColumns)
                board.add_window(planned)
                reference.add_window(planned, set())
            windows[window] = work.plan_active_window(plans, window, None, "leaves")
        elif step == "twice" and windows:  # a video planned in two parts: its clips joined
            window = rng.choice(list(windows))
            again = work.plan_active_window(plans, window, None, "leaves")
            board.add_window(again)
            reference.add_window(again, set())
        elif step == "join" and windows and not set(joined).issuperset(windows):
            window = rng.choice(sorted(set(windows) - set(joined)))
            merged = joining(board, joiner, window)
            board.add_part(window, merged, frozenset())
            reference.add_part(window, merged)
            joined[window] = list(merged.new_views)  # the window's plan holds them now
        elif step == "take" and jobs:
            job = rng.choice(jobs)
            uses = [u for u in reference.pending[job] if rng.random() < 0.5]
            numbered = {key: key for key in board.pending}  # the board's keys: their numbers
            key = numbered[job] if rng.random() < 0.5 else VideoJobKey(job.window, job.path)
            board.take_pending(key, uses)
            reference.take(job, uses)
            taken.extend((job, u) for u in uses)
        elif step == "again" and taken:
            job, use = taken.pop(rng.randrange(len(taken)))
            if job.window in windows:
                board.add_pending(job, use)
                reference.add(job, use)
        elif step == "forget" and jobs:
            views = {u.view for u in reference.pending[rng.choice(jobs)][:1]}
            board.forget_pending(views)
            reference.forget(views)
        elif step == "drop" and windows and rng.random() < 0.3:
            window = rng.choice(list(windows))
            views = [*windows.pop(window).plan.views, *joined.pop(window, ())]
            board.drop_window(window, views)
            reference.drop_window(window, views)
        same(board, reference)


def test_a_cold_window_pends_its_columns_with_no_sequence_a_video(tmp_path):
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    board = BatchBoard()
    board.add_window(planned)
    pending = board.pending
    assert not pending._loose and len(pending._parts[0]) == 1
    part = pending._parts[0][0]
    assert part.columns is planned.plan.videos.columns and part.base == 0
    job = pending.key_of(job_number(0, 3))  # a key made when asked for, its number in it
    assert job == VideoJobKey(0, planned.plan.videos.infos[3].path)
    assert job.number == job_number(0, 3) and pending.has(job) and pending.has_number(job.number)
    assert VideoJobKey(0, job.path) in pending and pending.number(VideoJobKey(0, job.path)) == (
        job.number)
    assert pending[VideoJobKey(0, job.path)] == planned.plan.videos[job.path].uses  # by path


def test_a_warm_window_takes_what_is_on_disk(tmp_path):
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    planned = work.plan_active_window([plan], 0, SomeOnDisk(), "leaves")
    videos = planned.plan.videos
    assert planned.pending.taken is not None and any(planned.pending.taken)
    for path, video in videos.items():
        missing = [(u.view, u.slot) not in {(k, s) for k, slots in planned.on_disk.items()
                                            for s in slots} for u in video.uses]
        assert planned.pending[path] == selected(video.uses, missing)


def test_bad_input_is_a_clear_error(tmp_path):
    plan = make_plan(tmp_path, fake_videos(4), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    with pytest.raises(ValueError, match="2 flags for"):
        PendingColumns(planned.plan.videos, bytearray(2))
    with pytest.raises(KeyError):
        PendingClips().key_of(job_number(0, 5))
    with pytest.raises(KeyError):
        PendingClips()[VideoJobKey(0, "nowhere")]


@pytest.mark.parametrize("warm", [False, True])
def test_urgency_entries_read_the_columns_as_the_clips(tmp_path, warm):
    """A window's jobs in each task's order, read from its pending columns by index, are
    those from a tuple of clips a video."""
    plans = two_plans(tmp_path)
    planned = work.plan_active_window(plans, 0, SomeOnDisk() if warm else None, "leaves")
    assert isinstance(planned.pending, PendingColumns) and (planned.pending.taken is not None
                                                            ) == warm
    tuples = {path: tuple(uses) for path, uses in planned.pending.items()}
    got, want = urgency_entries(0, planned.pending), urgency_entries(0, tuples)
    assert got.jobs == want.jobs
    assert {task: (p.tolist(), j.tolist()) for task, (p, j) in got.by_task.items()} == {
        task: (p.tolist(), j.tolist()) for task, (p, j) in want.by_task.items()}
    assert list(got.by_task) == list(want.by_task)
    for view in planned.plan.views:
        assert got.views.of(view) == want.views.of(view)


def test_a_job_goes_by_every_number_it_was_given(tmp_path):
    """A job held loose before a part holding its video came (a joining task's clips) has a
    number of its own; the part's number for it finds the same clips and key, and a window
    dropped takes its numbers with it."""
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    paths = [video.path for video in plan.listed]
    lead = work.plan_active_window([plan], 0, None, "leaves", lead=frozenset(paths[:4]))
    rest = work.plan_active_window([plan], 0, None, "leaves", skip=frozenset(paths[:4]))
    pending = PendingClips()
    assert pending.add_columns(0, lead.pending) == pending.next_number(0) - len(lead.pending)
    path = next(iter(rest.pending))
    job = VideoJobKey(0, path)
    early = rest.pending[path][:1]
    pending.set(job, early)
    own = pending.number(job)
    assert pending.has_number(own) and pending.key_of(own) == job
    first = pending.add_columns(0, rest.pending)
    assert first == job_number(0, len(lead.pending))
    joined = (*early, *rest.pending[path])
    for number in (own, first, pending.number(job)):
        assert pending.has_number(number) and pending.key_of(number) == job
        assert pending[pending.key_of(number)] == joined
    assert pending.key_of(first + 1).path == list(rest.pending)[1]
    pending.take(job, {(u.view, u.slot) for u in joined})
    assert not pending.has_number(own) and not pending.has_number(first)
    pending.drop_window(0)
    assert not pending.has_number(first + 1) and pending.next_number(0) == job_number(0, 0)
    with pytest.raises(KeyError):
        pending.key_of(own)
