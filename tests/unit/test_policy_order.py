"""Plan order, as the policies rank it (`sandfs/sched/policy.py`): the fifo ablation runs jobs
window by window, then by video path, and the priority policy breaks its last ties the same
way. A job's key is a string ("v10:..."), which puts window 10 before windows 9 and 2: the
window is ranked as a number."""

from __future__ import annotations

from types import SimpleNamespace

from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.board import BatchBoard
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.passes import PassBook
from sandfs.sched.policy import pick_next
from sandfs.sched.viewstate import ViewState
from tests.helpers.plans import fake_videos, make_plan

PATH = "/data/v.mp4"


def use(window: int, iteration: int) -> ClipUse:
    clip = SimpleNamespace(frame_indices=(0,))  # all the board reads of a clip here
    return ClipUse(ViewKey("plan", window, iteration), 0, clip, (("a", iteration),))


def board_of(jobs: dict[VideoJobKey, int]) -> BatchBoard:
    """A board with one pending clip for each job, needed at its iteration."""
    board = BatchBoard()
    for job, iteration in jobs.items():
        board.add_pending(job, use(job.window, iteration))
    return board


def picked(board: BatchBoard, policy: str, busy=frozenset(), passes=()):
    """The key of the job `policy` runs next: of the board's and the paused `passes'`."""
    states = dict(board.job_states(set(busy), lambda key: key.iteration, assemble_within=16))
    states |= dict(passes)
    best = pick_next(states, memory_pressure=False, policy=policy)
    return states[best]


def test_fifo_runs_window_9_before_window_10_and_window_2_before_both():
    w2, w9, w10 = (VideoJobKey(w, PATH) for w in (2, 9, 10))
    board = board_of({w10: 0, w9: 5, w2: 9})  # window 10's needed first: fifo is blind to it
    assert picked(board, "fifo") == w2
    assert picked(board, "fifo", busy={w2}) == w9
    assert picked(board, "priority") == w10


def test_fifo_takes_a_window_s_videos_by_path():
    first, second = VideoJobKey(3, "/data/a.mp4"), VideoJobKey(3, "/data/b.mp4")
    assert picked(board_of({second: 0, first: 9}), "fifo") == first


def test_jobs_equal_on_all_else_go_to_the_earlier_window():
    w9, w10 = VideoJobKey(9, PATH), VideoJobKey(10, PATH)
    board = board_of({w10: 4, w9: 4})
    assert picked(board, "priority") == w9


def test_fifo_resumes_a_paused_pass_of_window_10_after_window_9():
    w9, w10 = VideoJobKey(9, PATH), VideoJobKey(10, PATH)
    passes = PassBook(workers=1)
    passes.pause(w10, step=lambda: None)
    running = {w10: SimpleNamespace(key=w10, uses=[use(10, 0)])}
    paused = passes.states(running, lambda key: key.iteration, demanded=set())
    assert picked(board_of({w9: 5}), "fifo", passes=paused) == w9


def test_a_batch_read_back_from_disk_ranks_in_its_epoch_s_window(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(4), epochs=4, k_epochs=1)
    board = board_of({VideoJobKey(0, PATH): 9})
    state = ViewState.planned(plan, 2, 0)
    read_back = ViewKey(plan.plan_key(plan.window_of(2)), 2, 0)
    board.plan(read_back, state, on_disk=range(state.slots))  # every clip on disk
    assert plan.window_of(2) == 2
    assert picked(board, "fifo") == VideoJobKey(0, PATH)
    assert picked(board, "fifo", busy={VideoJobKey(0, PATH)}) == read_back
