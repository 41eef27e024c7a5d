"""A window planned in parts holds no object a batch for its uses and jobs: a part's uses hold
their batches as row numbers of its batch columns (`UseColumns.batch`), its jobs of each batch
find the batch by hash (`ViewJobs`), and a row or key is made when read. At 250,000 videos in
~150 parts, a `TableRow` and a `ViewKey` a batch a part were ~1.0M of each, ~200 MB
(docs/performance.md#a-windows-batches-and-the-board)."""

from __future__ import annotations

import gc

from sandfs.plan.batchcolumns import TableRow
from sandfs.plan.window import ViewKey
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, live_objects, make_plan

COUNTED = (TableRow, ViewKey)


def test_a_window_planned_in_parts_holds_no_row_or_key_a_batch(tmp_path):
    plan = make_plan(tmp_path, fake_videos(240), epochs=2, k_epochs=1)
    paths = [video.path for video in plan.listed]
    parts, per = 12, 20
    gc.collect()
    before = live_objects(COUNTED)
    board, book, done = BatchBoard(), WindowBook([plan]), frozenset()
    for k in range(parts):  # as the daemon plans a window: the book, then the board, a part
        lead = frozenset(paths[k * per:(k + 1) * per])
        planned = work.plan_active_window([plan], 0, None, "leaves", lead=lead, skip=done)
        if k:
            book.extend(0, planned.plan)
        else:
            book.add_window(planned.plan)
        board.add_window(planned)
        done |= lead
        del planned
    made = {kind: count - before[kind] for kind, count in live_objects(COUNTED).items()}
    window = book.windows[0]
    batches = len(window.views)
    uses = sum(len(video.uses) for video in window.videos.values())
    assert batches >= 60 and uses == 240 * len(plan.window_epochs(0))  # each video's clips
    # a row or key a batch a part before (~3 parts a batch here): none now, a few at most
    assert made[TableRow] == 0 and made[ViewKey] <= parts, made
    assert board.urgency.jobs_of(next(iter(window.views)))  # still found, made when read
