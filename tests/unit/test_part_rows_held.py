"""A window planned in parts holds no object a batch for its uses and jobs: a part's uses hold
their batches as row numbers of its batch columns (`UseColumns.batch`), its jobs of each batch
find the batch by hash (`ViewJobs`), and a row or key is made when read. At 250,000 videos in
~150 parts, a `TableRow` and a `ViewKey` a batch a part were ~1.0M of each, ~200 MB
(docs/performance.md#a-windows-batches-and-the-board). A task joining in parts joins each
video's uses as runs of row numbers, a table each: it held a `TableRow` a use."""

from __future__ import annotations

import gc

import numpy as np

from sandfs.plan.batchcolumns import TableRow
from sandfs.plan.uses import batches, distinct_rows
from sandfs.plan.window import ViewKey
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.pruning import table_rows, use_rows
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, live_objects, make_plan

COUNTED = (TableRow, ViewKey)


def planned_in_parts(plan, parts: int) -> tuple[BatchBoard, WindowBook]:
    """Window 0 planned in `parts` parts, as the daemon plans one: the book, then the board."""
    paths = [video.path for video in plan.listed]
    per = len(paths) // parts
    board, book, done = BatchBoard(), WindowBook([plan]), frozenset()
    for k in range(parts):
        lead = frozenset(paths[k * per:(k + 1) * per])
        planned = work.plan_active_window([plan], 0, None, "leaves", lead=lead, skip=done)
        if k:
            book.extend(0, planned.plan)
        else:
            book.add_window(planned.plan)
        board.add_window(planned)
        done |= lead
    return board, book


def test_a_window_planned_in_parts_holds_no_row_or_key_a_batch(tmp_path):
    plan = make_plan(tmp_path, fake_videos(240), epochs=2, k_epochs=1)
    parts = 12
    gc.collect()
    before = live_objects(COUNTED)
    board, book = planned_in_parts(plan, parts)
    made = {kind: count - before[kind] for kind, count in live_objects(COUNTED).items()}
    window = book.windows[0]
    batches = len(window.views)
    uses = sum(len(video.uses) for video in window.videos.values())
    assert batches >= 60 and uses == 240 * len(plan.window_epochs(0))  # each video's clips
    # a row or key a batch a part before (~3 parts a batch here): none now, a few at most
    assert made[TableRow] == 0 and made[ViewKey] <= parts, made
    assert board.urgency.jobs_of(next(iter(window.views)))  # still found, made when read


class Known:
    """The window's batches the joining task did not add itself (as the daemon's)."""

    def __init__(self, views, own) -> None:
        self.views, self.own = views, own

    def __contains__(self, key) -> bool:
        return key in self.views and key not in self.own


def test_a_task_joining_in_parts_holds_no_row_a_use(tmp_path):
    """Its parts merged (`WindowBook.merge`, `BatchBoard.add_part`) join a video's uses of
    the window's parts and its own as runs of row numbers: each use held a `TableRow`, and
    counted as a batch of its own where batches are found once (`distinct_rows`)."""
    for name in "ad":
        (tmp_path / name).mkdir()
    listed = fake_videos(240)
    plan = make_plan(tmp_path / "a", listed, epochs=2, k_epochs=1)
    board, book = planned_in_parts(plan, 12)
    joiner = make_plan(tmp_path / "d", listed, task="d", epochs=2, k_epochs=1, seed=5)
    paths = [video.path for video in plan.listed]
    gc.collect()
    before = live_objects(COUNTED)
    book.add_task(joiner)
    window, own, done = book.windows[0], set(), frozenset()
    for k in range(4):  # as the daemon's joining: a part at a time, the book then the board
        lead = frozenset(paths[k * 60:(k + 1) * 60])
        part, on_disk = work.plan_task_part(joiner, 0, None, Known(window.views, own),
                                            lead=lead, skip=done, resolved=window.view_plans)
        merged = book.merge(0, part, own)
        own.update(merged.new_views)
        board.add_part(0, merged, on_disk)
        done |= lead
    del part, merged
    gc.collect()
    made = {kind: count - before[kind] for kind, count in live_objects(COUNTED).items()}
    works = list(window.videos.values())
    joined = [video.uses for video in works
              if len({id(row.place[0]) for row in batches(video.uses)}) > 1]
    assert len(joined) > 100  # videos read by both tasks: their uses read several tables
    assert sum(len(video.uses) for video in works) == 2 * 240 * len(plan.window_epochs(0))
    assert made[TableRow] == 0, made  # a use each before (~960)
    pending = [board.pending[job] for job in board.pending.jobs()]
    for uses in ([video.uses for video in works], pending):
        assert len(distinct_rows(list(map(batches, uses)))[0]) == rows_read(uses)
    pruned = table_rows(window, works)  # its batches found as distinct_rows'
    one_at_a_time = use_rows(window, works)
    assert pruned is not None and all(np.array_equal(*(getattr(r, name) for r in (
        pruned, one_at_a_time))) for name in ("video", "out_nbytes", "lengths", "indices"))
    assert board.urgency.jobs_of(next(iter(own)))  # the joiner's batches found


def rows_read(uses: list) -> int:
    """The distinct rows videos' uses read, (table, number) (a batch planned in several parts
    has a row in each part's table), fewer than their uses."""
    rows = [batches(video) for video in uses]
    places = {(id(row.place[0]), row.place[1]) for video in rows for row in video}
    assert len(places) < sum(map(len, rows))
    return len(places)
