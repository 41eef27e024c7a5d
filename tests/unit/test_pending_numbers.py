"""How the board's pending clips number jobs and find keys made elsewhere (no number in them):
by the window's one index of its parts' paths, not part by part, and each job of a batch of
clips numbered once (`UrgencyOrder.add_many`)."""

from __future__ import annotations

import numpy as np

from sandfs.plan.hashrows import HashNumbers, hashes_of
from sandfs.plan.windowvideos import PathIndex
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.pending import PendingClips, job_number
from tests.helpers.plans import fake_videos, make_plan


def board_in_parts(tmp_path, videos: int = 24, parts: int = 4) -> BatchBoard:
    plan = make_plan(tmp_path, fake_videos(videos), epochs=4)
    paths = [video.path for video in plan.listed]
    per = -(-len(paths) // parts)
    board, done = BatchBoard(), frozenset()
    for k in range(parts):
        lead = frozenset(paths[k * per:(k + 1) * per])
        board.add_window(work.plan_active_window([plan], 0, None, "leaves", lead=lead,
                                                 skip=done))
        done |= lead
    return board


def test_a_key_made_elsewhere_is_found_by_the_windows_index_not_part_by_part(tmp_path,
                                                                             monkeypatch):
    board = board_in_parts(tmp_path)
    pending, counts = board.pending, [0]
    parts = pending._parts[0]
    assert len(parts) == 4
    number = PathIndex.number

    def counted(self, path):  # a part's own path index: what a lookup part by part asks
        counts[0] += 1
        return number(self, path)

    monkeypatch.setattr(PathIndex, "number", counted)
    for part in parts:
        for group, info in enumerate(part.infos):
            key = VideoJobKey(0, info.path)  # no number: as `add_part` or `carry` make one
            assert pending.number(key) == job_number(0, part.base + group)
            assert pending.has(key) and pending[key] == part.uses(group)
    assert counts[0] == 0
    assert not pending.has(VideoJobKey(0, "nowhere")) and not pending.has(VideoJobKey(1, "x"))
    assert set(board.pending_jobs()) == {VideoJobKey(0, i.path) for p in parts for i in p.infos}


def test_add_many_numbers_each_job_once(tmp_path):
    board = board_in_parts(tmp_path, parts=2)
    pending, urgency = board.pending, board.urgency
    urgency.urgent(pending, set())  # the order built: `add_many` merges into it
    jobs = [VideoJobKey(0, f"v{i}.mp4") for i in range(7)]  # no part holds them
    use = next(iter(pending.values()))[0]
    asked: list[VideoJobKey] = []
    number = pending.number

    def counted(job):
        asked.append(job)
        return number(job)

    pending.number = counted
    urgency.add_many([(job, use) for job in jobs for _ in range(5)], pending)
    assert sorted(asked, key=lambda j: j.path) == jobs  # 7 jobs of 5 clips: 7 numbers


def test_a_job_becoming_loose_keeps_its_parts_number(tmp_path):
    board = board_in_parts(tmp_path, parts=3)
    pending = board.pending
    part = pending._parts[0][2]
    key = VideoJobKey(0, part.infos[1].path)
    uses, finds, find = pending[key], [], pending._find
    pending._find = lambda job: finds.append(job) or find(job)
    pending.set(key, uses[:1])
    assert finds == [key]  # its number from what `set` found: not looked up again
    assert pending.number(key) == job_number(0, part.base + 1) and not pending._own
    assert pending.key_of(job_number(0, part.base + 1)) == key and pending[key] == uses[:1]


def test_a_window_in_parts_merges_its_order_without_a_call_an_entry(tmp_path):
    """Each part merges the window's order so far with the entries still pending: read from
    the parts' counts at once (`have_numbers`), as `has_number` reads each."""
    plan = make_plan(tmp_path, fake_videos(24), epochs=4)
    paths = [video.path for video in plan.listed]
    board, done, calls = BatchBoard(), frozenset(), [0]
    pending = board.pending
    has_number = pending.has_number

    def counted(job):
        calls[0] += 1
        return has_number(job)

    pending.has_number = counted
    board.urgency.urgent(pending, set())
    for k in range(4):
        lead = frozenset(paths[k * 6:(k + 1) * 6])
        board.add_window(work.plan_active_window([plan], 0, None, "leaves", lead=lead,
                                                 skip=done))
        done |= lead
    assert calls[0] == 0
    part = pending._parts[0][1]
    pending.set(VideoJobKey(0, part.infos[0].path), ())  # loose, none left
    pending.set(VideoJobKey(0, part.infos[2].path), pending[VideoJobKey(0, part.infos[2].path)])
    pending.set(VideoJobKey(0, "elsewhere.mp4"), pending[VideoJobKey(0, part.infos[3].path)])
    pending.take(VideoJobKey(0, part.infos[4].path), {(u.view, u.slot) for u in
                                                       pending[VideoJobKey(0, part.infos[4].path)]})
    jobs = [job_number(0, n) for n in range(30)] + list(pending._loose_of) + [
        job_number(1, 0), job_number(0, 1 << 31)]
    assert pending.have_numbers(jobs).tolist() == [has_number(job) for job in jobs]


def test_hash_numbers_keep_the_order_they_joined_in_past_a_collision():
    """-1 and -2 hash alike in CPython: both numbers found, the earlier joined first; a copy
    sharing the old columns keeps them."""
    assert hash(-1) == hash(-2)
    first = HashNumbers().joined(hashes_of([5, -1, 7], 3), np.array([0, 1, 2]))
    both = first.joined(hashes_of([-2, 9], 2), np.array([3, 4]))
    assert list(both.numbers(-1)) == [1, 3] and list(both.numbers(9)) == [4]
    assert list(first.numbers(-2)) == [1] and len(first) == 3 and len(both) == 5
    assert both.held(hashes_of([8, 7, -2], 3)) == [1, 2] and HashNumbers().held(
        hashes_of([1], 1)) == []


def test_an_own_number_given_before_a_part_held_the_video_is_not_its_number_after(tmp_path):
    """A job numbered while no part held it (its clips all on disk), then held by a column
    part and pending again, is numbered as that part maps it: its first own number maps to
    nothing, and urgency would lose it there."""
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    pending = PendingClips()
    job = VideoJobKey(0, planned.pending.infos[3].path)
    pending.number(job)  # no part holds it yet: a number of its own
    pending.add_columns(0, planned.pending)
    pending.set(job, pending[job])
    number = pending.number(job)
    assert pending.has_number(number)
    assert pending.key_of(number) == job


def test_pending_jobs_are_counted_without_a_key_a_job(tmp_path, monkeypatch):
    """status.json's count of pending jobs reads each part's counts: at 250,000 videos a key
    made a job, at every read of the file, held the event loop for seconds."""
    board = board_in_parts(tmp_path)
    pending = board.pending
    parts = pending._parts[0]
    taken = VideoJobKey(0, parts[1].infos[2].path)
    pending.set(taken, ())  # its clips made: no longer pending
    loose = VideoJobKey(0, parts[2].infos[0].path)
    pending.set(loose, pending[loose])  # held loose, its clips still pending
    expected = len(board.pending_jobs())
    assert expected == sum(len(p.infos) for p in parts) - 1

    def no_keys(self):
        raise AssertionError("a key made a pending job to count them")

    monkeypatch.setattr(PendingClips, "__iter__", no_keys)
    assert board.pending_count() == expected
