"""A window enters the board as its planning thread grouped it (`work.plan_active_window`):
its pending clips by video and its jobs in each task's read order, with nothing on the event
loop walking its clips. The board ends as walking them clip by clip would leave it."""

from __future__ import annotations

import numpy as np

from sandfs.plan.window import view_key
from sandfs.sched import work
from sandfs.sched.board import BatchBoard, ReadyView
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.objects import Spot
from sandfs.sched.urgency import UrgencyOrder
from tests.helpers.plans import SomeOnDisk, fake_videos, make_plan


def expected_pending(planned, ready) -> dict:
    """The clips of each video not on disk, of batches not ready: clip by clip."""
    on_disk = {Spot(k, s) for k, slots in planned.on_disk.items() for s in slots}
    found = {}
    for path, video in planned.plan.videos.items():
        uses = tuple(u for u in video.uses if Spot.of(u) not in on_disk and u.view not in ready)
        if uses:
            found[VideoJobKey(planned.plan.window, path)] = uses
    return found


def same_urgency(board: BatchBoard) -> None:
    """The board's order answers as one built from scratch over its pending clips."""
    fresh = UrgencyOrder()
    for busy in (set(), set(list(board.pending)[:5])):
        assert board.urgency.urgent(board.pending, busy) == fresh.urgent(board.pending, busy)
    views = list(board.views)
    for view in views[::7]:
        assert board.urgency.of_views({view}, board.pending) == fresh.of_views({view},
                                                                              board.pending)


def test_a_window_enters_the_board_as_walking_its_clips_would_leave_it(tmp_path):
    videos = fake_videos(60)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    plans = [make_plan(tmp_path / "a", videos=videos, task="a", epochs=4, k_epochs=2),
             make_plan(tmp_path / "b", videos=videos, task="b", epochs=4, k_epochs=2, seed=5)]
    store = SomeOnDisk()
    board = BatchBoard()
    ready = {view_key(plans[0], 0, 1)}  # made already: its clips are not pending
    board.ready[next(iter(ready))] = ReadyView(np.zeros(8, np.uint8), {"a"})
    first = work.plan_active_window(plans, 0, store, "leaves")
    assert first.on_disk and first.pending
    board.add_window(first)
    second = work.plan_active_window(plans, 1, None, "leaves")
    board.add_window(second)
    pending = expected_pending(first, ready) | expected_pending(second, set())
    assert board.pending == pending
    for key, slots in first.on_disk.items():
        if key not in ready:
            assert slots <= board.views[key].on_disk
    assert not ready & set(board.views)
    same_urgency(board)
    board.drop_window(0, first.plan.views)
    assert board.pending == expected_pending(second, set())
    same_urgency(board)
    assert not any(board.urgency.jobs_of(view) for view in first.plan.views)
