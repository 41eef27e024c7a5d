"""A window's uses stay columns (`Uses`) through what changes them on the event loop and in a
planning thread: a task resting or leaving (`WindowBook._release`), a part merged or extended
into a window, a warm mount's pending clips. As a tuple of `ClipUse` made again, a release of
250,000 videos' uses took the loop 3.8 us a clip and held 234 bytes a clip more: the `ClipUse`s
made here are counted, and the rows kept are the window's own."""

from __future__ import annotations

import gc
import pickle
import tracemalloc
from array import array
from typing import NamedTuple

import numpy as np
import pytest

from sandfs.plan import uses as uses_module
from sandfs.plan.batchcolumns import BatchColumns
from sandfs.plan.uses import (
    ClipUse,
    ColumnUses,
    TableRows,
    UseColumns,
    Uses,
    ViewRow,
    WindowUses,
    batches,
    distinct_rows,
    frame_rows,
)
from sandfs.plan.window import ViewKey, plan_window
from sandfs.plan.windowvideos import ColumnVideo
from sandfs.sched import work
from sandfs.sched.objects import clip_object_key
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import PlanStore, fake_videos, make_plan


@pytest.fixture
def made(monkeypatch) -> list[int]:
    """How many `ClipUse`s were made (each one as a clip's record is looked at)."""
    count = [0]
    new_use = uses_module._new_use

    def counted(cls, fields):
        count[0] += 1
        return new_use(cls, fields)

    monkeypatch.setattr(uses_module, "_new_use", counted)
    return count


def two_tasks(tmp_path, videos: int = 40, **overrides):
    for name in "ab":
        (tmp_path / name).mkdir()
    listed = fake_videos(videos)
    return (make_plan(tmp_path / "a", videos=listed, task="a", **overrides),
            make_plan(tmp_path / "b", videos=listed, task="b", seed=3, **overrides))


def rows_of(uses) -> list[tuple[int, int]]:
    """Each use's batch as the row it reads, of the columns it reads (made when read, a row
    is no object held: the same batch row of the same columns)."""
    return [(id(row.place[0]), row.place[1]) for row in batches(uses)]


def row(view: int, clips: int = 4) -> ViewRow:
    return ViewRow(ViewKey(("k",), 0, view), tuple(f"c{view}.{s}" for s in range(clips)),
                   (("t", view),))


def test_column_operations_stay_columns():
    made = [row(0), row(1), row(2)]
    uses = Uses(made, [3, 0, 2])
    plain = tuple(uses)
    assert uses.keep(lambda view: True) is uses
    kept = uses.keep(lambda view: view.iteration != 1)
    assert isinstance(kept, ColumnUses) and kept == (plain[0], plain[2])
    assert batches(kept) == (made[0], made[2])
    chosen = uses.select([False, True, True])
    assert isinstance(chosen, ColumnUses) and chosen == plain[1:]
    with pytest.raises(ValueError, match="2 flags for 3 uses"):
        uses.select([True, False])
    loose = (ClipUse(made[1].view, 3, "c1.3", made[1].readers),
             ClipUse(ViewKey(("k",), 0, 9), 1, "c9.1", (("t", 9),)))
    for joined, expected in ((uses + loose, plain + loose), (loose + uses, loose + plain)):
        assert isinstance(joined, ColumnUses) and joined == expected
    # the `Uses` side's rows are its own: not made again from its records
    assert batches(uses + loose)[:3] == tuple(made) and batches(loose + uses)[2:] == tuple(made)
    assert uses + () is uses and () + uses is uses  # noqa: RUF005  (the operators)
    assert Uses.of(loose) == loose and Uses.of(uses) is uses


def table_of(rows: list[ViewRow]) -> BatchColumns:
    """Batch columns with these rows."""
    table = BatchColumns()
    for made in rows:
        number = table.append(made.view, 10)
        table.set_readers(number, made.readers)
        table.set_clips(number, made.clips)
    return table


def fields(rows) -> list[tuple]:
    return [(r.view, tuple(r.clips), r.readers) for r in rows]


def test_a_windows_uses_are_groups_of_its_columns():
    made = [row(0), row(1), row(2)]
    columns = UseColumns(table_of(made), np.array([2, 0, 1, 2], np.int32),
                         np.array([1, 3, 0, 2], np.uint8), np.array([0, 1, 4]))
    first, second = columns.group(0), columns.group(1)
    assert type(first) is WindowUses and len(columns) == 2
    assert first == Uses([made[2]], [1]) and len(second) == 3
    assert second == Uses([made[0], made[1], made[2]], [3, 0, 2])
    assert fields(batches(second)) == fields(made) and second[1:] == tuple(second)[1:]
    assert second.keep(lambda view: True) is second and second.select([1, 0, 1]) == (
        second[0], second[2])
    assert first + second == tuple(first) + tuple(second)
    with pytest.raises(ValueError, match="group 2 of a window's 2"):
        columns.group(2)
    with pytest.raises(ValueError, match=r"uses \[3, 5\) of a window's 4"):
        WindowUses(columns, 3, 5)
    with pytest.raises(ValueError, match="4 batches, 3 slots"):
        UseColumns(table_of(made), np.zeros(4, np.int32), np.zeros(3, np.uint8),
                   np.array([0, 4]))
    with pytest.raises(ValueError, match=r"batch rows 0\.\.3 of 3"):
        UseColumns(table_of(made), np.array([0, 3], np.int32), np.zeros(2, np.uint8),
                   np.array([0, 2]))


def test_a_planned_windows_videos_share_its_columns(tmp_path):
    """Each video's uses a group of the window's columns, equal to the uses planned clip by
    clip: a tuple of rows and a column of slots a video were 33 bytes a clip (5 a video)."""
    first, second = two_tasks(tmp_path)
    window = plan_window([first, second], 0)
    uses = [w.uses for w in window.videos.values()]
    assert all(type(u) is WindowUses for u in uses)
    assert len({id(u._columns) for u in uses}) == 1  # one set of columns
    by_view = {}
    for path, video in window.videos.items():
        for use in video.uses:
            assert window.views[use.view] and use.clip.video_index is not None
            by_view.setdefault(use.view, {})[use.slot] = path
    for key, plan in window.view_plans.items():  # every clip of every batch, once
        assert sorted(by_view[key]) == list(range(len(plan.clips)))
    sent = pickle.loads(pickle.dumps(uses[0]))  # to a worker process: its own clips only
    assert type(sent) is tuple and sent == uses[0]


@pytest.mark.parametrize("leave", ["rest_task", "remove_task"])
def test_a_rest_or_a_remove_leaves_the_other_uses_as_columns(tmp_path, made, leave):
    first, second = two_tasks(tmp_path)
    book = WindowBook([first, second])
    book.add_window(plan_window([first, second], 0))
    videos = book.windows[0].videos
    before = {path: (tuple(w.uses), rows_of(w.uses)) for path, w in videos.items()}
    made[0] = 0
    released = getattr(book, leave)("b")
    assert released and made[0] == 0  # no ClipUse made to filter them
    for path, video in videos.items():
        uses, ids = before[path]
        assert isinstance(video.uses, ColumnUses)
        assert video.uses == tuple(u for u in uses if u.view not in released)
        assert set(rows_of(video.uses)) <= set(ids)  # the window's rows, not new ones
    made[0] = 0
    assert book.rest_task("a")  # the rest: every use goes, with none made either
    assert made[0] == 0 and all(isinstance(v.uses, ColumnUses) and not v.uses
                                for v in videos.values())


def test_a_release_with_nothing_released_holds_nothing_more(tmp_path):
    first, second = two_tasks(tmp_path, videos=200)
    book = WindowBook([first, second])
    book.add_window(plan_window([first, second], 0))
    book.add_task(make_plan(tmp_path / "a", videos=first.videos, task="c"))
    videos = book.windows[0].videos
    before = {path: w.uses for path, w in videos.items()}
    gc.collect()
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        assert book.rest_task("c") == {}
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    assert all(videos[path].uses == uses for path, uses in before.items())
    assert all(type(videos[path]) is ColumnVideo for path in before)  # no record made
    clips = sum(len(uses) for uses in before.values())
    assert grown < clips  # a byte a clip at most (was 234)


def test_a_merged_part_and_an_extended_window_keep_their_uses_as_columns(tmp_path):
    first, second = two_tasks(tmp_path)
    book = WindowBook([first])
    lead = frozenset(first.listed[i].path for i in first.batch_slots(0, 0))
    book.add_window(plan_window([first], 0, lead=lead))
    book.extend(0, plan_window([first], 0, skip=lead))
    videos = book.windows[0].videos
    before = {path: tuple(w.uses) for path, w in videos.items()}
    book.add_task(second)
    book.unread.discard("b")
    part = plan_window([second], 0)
    ids = {path: rows_of(w.uses) for path, w in part.videos.items()}
    merged = book.merge(0, part)
    assert merged.uses and merged.new_views
    for path, uses in merged.uses.items():
        assert isinstance(uses, ColumnUses) and rows_of(uses) == ids[path]
        assert uses == tuple(part.videos[path].uses)
    for path, video in videos.items():
        assert isinstance(video.uses, ColumnUses)
        assert video.uses == before.get(path, ()) + tuple(merged.uses.get(path, ()))


def test_a_warm_window_s_pending_clips_are_its_columns(tmp_path):
    first, _ = two_tasks(tmp_path)
    whole = plan_window([first], 0)
    held = frozenset(clip_object_key(u, w.info) for w in whole.videos.values()
                     for u in w.uses[::2])  # every other clip of each video on disk
    planned = work.plan_active_window([first], 0, PlanStore(1 << 40, held), "leaves")
    some = 0
    for path, video in planned.plan.videos.items():
        pending = planned.pending[path]
        assert isinstance(pending, ColumnUses)
        assert pending == video.uses[1::2]
        assert set(rows_of(pending)) <= set(rows_of(video.uses))
        some += len(pending) < len(video.uses)
    assert some


def test_a_slice_of_two_byte_slots_that_fit_in_one_keeps_their_values():
    big, small = row(0, clips=300), row(1)
    uses = Uses([big, big, small], [299, 5, 3])
    tail = uses[1:]
    assert [u.slot for u in tail] == [5, 3] and len(list(tail)) == 2
    assert [u.slot for u in uses.select([True, False, True])] == [299, 3]


def test_uses_of_two_tables_read_each_by_number(made):
    """Uses joined from parts planned apart (a task joining a window planned in parts) read
    their batches from each part's table, a run each: no row made a use, each read as the
    loose rows they stand for, a batch's row found once (`distinct_rows`)."""
    ours, theirs = [framed(0), framed(1), framed(2)], [framed(7), framed(8)]
    first, second = table_of(ours), table_of(theirs)
    joined = (Uses(TableRows(first, array("i", [2, 0])), [1, 3])
              + Uses(TableRows(second, array("i", [1, 1, 0])), [0, 2, 3])
              + Uses(TableRows(first, range(1, 3)), [2, 1]))
    loose = [ours[2], ours[0], theirs[1], theirs[1], theirs[0], ours[1], ours[2]]
    reference = Uses(loose, [1, 3, 0, 2, 3, 2, 1])
    rows = batches(joined)
    assert type(rows) is TableRows and len(rows) == 7 and made[0] == 0  # joined, none made
    assert [table for table, _ in rows.runs()] == [first, second, first]
    assert list(joined) == list(reference) and list(frame_rows(joined)) == list(
        frame_rows(reference))
    assert list(rows.views()) == [r.view for r in loose] == [
        rows.key(i) for i in range(7)] == [rows.key(i - 7) for i in range(7)]
    for index in (slice(None), slice(1, 5), slice(None, None, 2), slice(None, None, -1),
                  slice(4, 4)):
        assert fields(rows[index]) == fields(loose[index]) and joined[index] == reference[
            index]
    mask = [True, False, False, True, True, False, True]
    assert joined.select(mask) == reference.select(mask)
    assert [table for table, _ in joined.select(mask).columns[0].runs()] == [first, second,
                                                                             first]
    assert [t for t, _ in rows.select([0, 0, 1, 1, 1, 0, 0]).runs()] == [second]
    with pytest.raises(IndexError):
        rows[7]
    found, index = distinct_rows([rows, rows[2:]])
    assert len(found) == 5 and fields(found[i] for i in index) == fields(loose + loose[2:])
    # a row each held (uses joined with loose ones): found once all the same
    more = (ClipUse(ViewKey(("k",), 0, 9), 0, "c", (("t", 9),)),)
    mixed = batches(joined + more)
    found, index = distinct_rows([mixed, rows])
    assert type(mixed) is tuple and len(found) == 6 and list(index)[8:] == list(index)[:7]


class Clip(NamedTuple):
    frame_indices: tuple[int, ...]
    source: tuple | None


def framed(view: int) -> ViewRow:
    """A batch of 4 clips with their frames."""
    made = row(view)
    return ViewRow(made.view, tuple(Clip((view, s), None) for s in range(4)), made.readers)
