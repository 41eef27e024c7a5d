"""The dispatcher ranks the pending jobs each task needs soonest, not every pending job
(`sandfs/sched/urgency.py`): with 1,000 videos, ranking all of them at every dispatch took
half the daemon's CPU."""

from __future__ import annotations

from types import SimpleNamespace

from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched import urgency
from sandfs.sched.board import BatchBoard
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.urgency import UrgencyOrder


def view(i: int) -> ViewKey:
    return ViewKey("plan", 0, i)


def job(i: int) -> VideoJobKey:
    return VideoJobKey(0, f"v{i:04d}.mp4")


def use(position: int, *tasks: str) -> ClipUse:
    clip = SimpleNamespace(frame_indices=(position,))  # all the board reads of a clip here
    return ClipUse(view(position), 0, clip, tuple((t, position) for t in tasks or ("a",)))


def test_each_task_s_soonest_jobs_are_ranked_and_not_the_others():
    order = UrgencyOrder(per_task=4)
    pending = {job(i): [use(i)] for i in range(200)}
    assert order.urgent(pending, busy=set()) == {job(i) for i in range(4)}
    assert order.urgent(pending, busy={job(1)}) == {job(i) for i in (0, 2, 3, 4)}


def test_jobs_tied_with_the_last_one_ranked_are_ranked_too():
    """The videos of one batch share its position; `policy.priority` orders them by the
    decoding before their clips, so none may be left out."""
    order = UrgencyOrder(per_task=2)
    pending = {job(0): [use(0)], job(1): [use(1)], job(2): [use(1)], job(3): [use(1)],
               job(4): [use(2)]}
    assert order.urgent(pending, busy=set()) == {job(i) for i in range(4)}


def test_every_task_gets_its_soonest_jobs_whatever_the_others_stand_at():
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(i, "a")] for i in range(100)}
    pending |= {job(100 + i): [use(500 + i, "b")] for i in range(100)}
    assert order.urgent(pending, busy=set()) == {job(0), job(1), job(100), job(101)}


def test_jobs_done_are_passed_and_jobs_added_are_ranked():
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(10 + i)] for i in range(10)}
    assert order.urgent(pending, busy=set()) == {job(0), job(1)}
    pending[job(0)], pending[job(1)] = [], []  # taken by jobs that ran
    assert order.urgent(pending, busy=set()) == {job(2), job(3)}
    pending[job(20)] = [use(1)]  # a batch planned again, needed first
    order.rebuild()
    assert order.urgent(pending, busy=set()) == {job(20), job(2)}


def test_the_jobs_of_a_batch_a_reader_waits_for_are_found_wherever_it_is():
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(i)] for i in range(100)}
    pending[job(100)] = [use(90)]
    assert order.of_views({view(90)}, pending) == {job(90), job(100)}
    pending[job(90)] = []
    assert order.of_views({view(90)}, pending) == {job(100)}


def test_the_board_ranks_a_far_batch_a_reader_is_blocked_on():
    board = BatchBoard()
    for i in range(300):
        board.add_pending(job(i), use(i))
    board.wait_started(view(250))
    ranked = {key for _, key in board.job_states(set(), lambda key: key.iteration,
                                                  assemble_within=16)}
    assert job(250) in ranked
    assert len(ranked) < 40


def test_one_clip_pending_again_is_placed_in_the_order_without_rebuilding_it():
    """A clip a job could not keep, or a batch planned again, is one clip: rebuilding the
    whole order for it cost O(pending clips) on the event loop each time (100,000 entries at
    10,000 videos). It is placed where it belongs, the cursor moved back to it if sooner."""
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(10 + i)] for i in range(10)}
    assert order.urgent(pending, busy=set()) == {job(0), job(1)}
    pending[job(0)], pending[job(1)], pending[job(2)] = [], [], []
    assert order.urgent(pending, busy=set()) == {job(3), job(4)}  # the cursor is past 0-2
    built = order._order
    again = use(11)  # job 1's clip, not kept: pending again
    pending[job(1)] = [again]
    order.add(job(1), again)
    pending[job(30)] = [use(5, "b")]  # a task the order had not seen
    order.add(job(30), pending[job(30)][0])
    assert order._order is built
    assert order.urgent(pending, busy=set()) == {job(1), job(3), job(30)}
    assert order._order is built
    assert order.of_views({view(5)}, pending) == {job(30)}
    order.rebuild()  # rebuilt from scratch: the same answer
    assert order.urgent(pending, busy=set()) == {job(1), job(3), job(30)}


def test_clips_pending_again_between_two_reads_are_placed_by_position():
    """A job's unkept clips are `add`ed one after another with no read between: placed at
    the next read, in position order whatever order they came in (the later one first
    made the cursor skip the sooner), after the entries already at their position."""
    order = UrgencyOrder(per_task=1)
    pending = {job(0): [use(0)], job(1): [use(20)]}
    assert order.urgent(pending, busy=set()) == {job(0)}
    pending[job(0)] = []  # made: the cursor passes it
    for i, position in ((2, 50), (3, 20), (4, 10), (5, 60)):  # past the end, a tie, a gap
        pending[job(i)] = [use(position)]
        order.add(job(i), pending[job(i)][0])
    pending[job(6)] = [use(5, "b")]  # and two for a task the order had not seen
    pending[job(7)] = [use(1, "b")]
    order.add(job(6), pending[job(6)][0])
    order.add(job(7), pending[job(7)][0])
    assert order.urgent(pending, busy=set()) == {job(4), job(7)}
    assert [p for p, _ in order.entries("a")] == [0, 10, 20, 20, 50, 60]
    assert [j for _, j in order.entries("a")][1:] == [job(4), job(1), job(3), job(2), job(5)]
    assert [j for _, j in order.entries("b")] == [job(7), job(6)]


def test_a_window_s_clips_merge_into_the_order_without_rebuilding_it():
    """A window or a task's part adds thousands of clips at once: they are merged with the
    entries not passed yet (rebuilding walked every pending clip on the event loop, about a
    second a part at 10,000 videos); entries of jobs no longer pending are dropped."""
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(10 + i)] for i in range(10)}
    assert order.urgent(pending, busy=set()) == {job(0), job(1)}
    pending[job(0)] = []
    del pending[job(5)]  # its window dropped
    built = order._order
    added = [(job(100 + i), use(2 * i, "a", "b")) for i in range(8)]
    for key, clip in added:
        pending[key] = [clip]
    order.add_many(added, pending)
    assert order._order is built
    assert [j for _, j in order.entries("a")] == [
        job(100), job(101), job(102), job(103), job(104), job(105), job(1), job(106), job(2),
        job(3), job(107), job(4), job(6), job(7), job(8), job(9)]
    assert order.urgent(pending, busy=set()) == {job(i) for i in range(100, 104)}  # a, b
    assert order.of_views({view(14)}, pending) == {job(4), job(107)}


def test_a_job_s_work_is_counted_again_when_its_pending_clips_change():
    """The board keeps each ranked job's remaining work between dispatches (counting every
    frame of every urgent job at each dispatch was a fifth of the ranking's time): a clip
    added to the job, or taken by a pass, changes it at the next ranking."""
    board = BatchBoard()
    board.add_pending(job(0), use(0))

    def work() -> int:
        (state, _), = board.job_states(set(), lambda key: key.iteration, assemble_within=16)
        return state.remaining_work

    assert work() == 1 + 1  # one frame, one clip
    assert work() == 2
    board.add_pending(job(0), use(7))
    assert work() == 2 + 2
    board.take_pending(job(0), [board.pending[job(0)][0]])
    assert work() == 1 + 1
    board.drop_window(0, [])
    assert not board._work


def test_a_job_ranks_by_the_clips_it_has_left_not_by_one_taken():
    """A job's entry is made at its soonest clip; a pass that takes that clip alone (made
    ahead for the next window), or its batch failing, leaves the job ranked by the clips it
    has left, as an order built from scratch ranks it, not ahead of a job needed sooner."""
    board = BatchBoard()
    board.urgency.per_task = 1
    board.urgency._built(board.pending)  # the order is made: clips are placed, not rebuilt
    for key, position in ((job(0), 0), (job(0), 10), (job(1), 5), (job(2), 3), (job(2), 8)):
        board.add_pending(key, use(position))
    assert board.urgency.urgent(board.pending, busy=set()) == {job(0)}
    board.take_pending(job(0), [board.pending[job(0)][0]])  # its clip at 0
    assert board.urgency.urgent(board.pending, busy=set()) == {job(2)}
    board.forget_pending({view(3)})  # job 2's batch at 3 failed: its clip at 8 is left
    assert board.urgency.urgent(board.pending, busy=set()) == {job(1)}
    assert board.urgency.urgent(board.pending, busy=set()) == UrgencyOrder(1).urgent(
        board.pending, busy=set())
    board.add_pending(job(0), use(2))  # pending again, sooner than the clips it has left
    assert board.urgency.urgent(board.pending, busy=set()) == {job(0)}


def test_a_job_made_and_pending_again_ranks_by_its_clip_now():
    """A job made (its entry not passed: the cursor waits at a busy job's) and pending again
    for a later clip ranks at that clip, not at the entry of the clip it made."""
    order = UrgencyOrder(per_task=1)
    pending = {job(2): [use(0)], job(0): [use(1)], job(1): [use(5)]}
    assert order.urgent(pending, busy={job(2)}) == {job(0)}
    pending[job(0)] = [use(9)]  # made; a clip it could not keep is pending again
    order.add(job(0), pending[job(0)][0])
    assert order.urgent(pending, busy={job(2)}) == {job(1)}
    assert {p for p, j in order.entries("a") if j == job(0)} == {9}  # the stale one passed


def test_the_soonest_positions_kept_stay_few(monkeypatch):
    """Each ranked job's soonest positions are kept while its clips are the same, not one
    entry a video for the window's life: past a bound they go, and are found again."""
    monkeypatch.setattr(urgency, "_SOONEST_KEPT", 8)
    order = UrgencyOrder(per_task=2)
    pending = {job(i): [use(i)] for i in range(40)}
    for done in range(0, 38, 2):
        assert order.urgent(pending, busy=set()) == {job(done), job(done + 1)}
        pending[job(done)], pending[job(done + 1)] = [], []
        assert len(order._soonest) <= 8
