"""A window's clips as columns (`LeafRows`), what ranking the clips to keep on disk reads
(`objects.soonest_clips`, `needs_pruning`): read from the window's columns where it has them
(a chunk's use columns, its batch rows' readers and task plans, its clip tables' frame
lists), a batch at a time, not a use at a time: a walk of every use (a `ColumnVideo`, a
batch key made and hashed, a readers tuple made a use) took ~2 us a clip of a window of
20,000 videos, against ~0.2 (docs/performance.md#the-windows-scheduling-tables)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sandfs.plan.batchcolumns import BatchColumns
from sandfs.plan.batchrows import BatchRows, RowMap
from sandfs.plan.cliptable import ClipTable, frame_count
from sandfs.plan.task import TaskPlan
from sandfs.plan.uses import ClipUse, ColumnUses, UseColumns
from sandfs.plan.window import ViewKey, WindowPlan
from sandfs.plan.windowvideos import ColumnRun, WindowVideos


def out_frame_nbytes(plan: TaskPlan) -> int:
    """One output frame of the task's clips, in bytes."""
    h, w = plan.out_hw
    return h * w * 3 * np.dtype(plan.out_dtype).itemsize


@dataclass(frozen=True, slots=True)
class LeafRows:
    """A window's clips as columns, in the order of its videos and their uses: what ranking
    the clips to keep reads, in numpy rather than a tuple and a sort key a clip."""

    paths: list[str]
    keys: Sequence[ViewKey]  # the window's batches (`_Keys`: made when read)
    view: np.ndarray  # index in `keys` (int32)
    video: np.ndarray  # index in `paths` (int32)
    first: np.ndarray  # `first_reader` (int32 where every one fits, else int64)
    slot: np.ndarray  # uint16
    nbytes: np.ndarray  # `clip_nbytes` (int64)
    uses: list  # each video's uses (`paths`' order)

    @property
    def total(self) -> int:
        return int(self.nbytes.sum())


def leaf_rows(plan: WindowPlan) -> LeafRows:
    """The window's clips as columns, read from the window's columns where it has them (a
    chunk's use columns, its batch rows' readers and profiles, its clip tables' frame lists)
    and a use at a time for the rest (a video held as a record, a dict of videos). What a
    clip shares with its batch (its readers' first position, one output frame's bytes) is
    found once a batch."""
    batches = _Batches(plan)
    paths: list[str] = []
    numbers: list[np.ndarray] = []  # each video's number in the columns, -1: `loose`
    loose: dict[int, Sequence[ClipUse]] = {}
    runs: list[ColumnRun] = []
    run_of: list[np.ndarray] = []  # each video's run (-1: `loose`) and its group there
    group: list[np.ndarray] = []
    columns: tuple[list[np.ndarray], ...] = ([], [], [], [])  # view, slot, nbytes, video
    videos = plan.videos
    for run in _runs(videos):
        if isinstance(run, ColumnRun):
            got = batches.run_columns(run, len(paths))
            paths.extend(run.paths)
            numbers.append(np.arange(run.first + run.start, run.first + run.end))
            run_of.append(np.full(run.end - run.start, len(runs), np.int32))
            group.append(np.arange(run.start, run.end, dtype=np.int32))
            runs.append(run)
        else:
            path, work = run
            uses = work.uses
            got = _loose_columns(uses, batches, len(paths))
            loose[len(paths)] = uses
            paths.append(path)
            numbers.append(np.full(1, -1, np.int64))
            run_of.append(np.full(1, -1, np.int32))
            group.append(np.zeros(1, np.int32))
        for column, part, dtype in zip(columns, got, _DTYPES, strict=True):
            column.append(part.astype(dtype, copy=False))
    view, slot, nbytes, video = (_joined(c, d) for c, d in zip(columns, _DTYPES, strict=True))
    return LeafRows(paths, batches.keys, view, video, _narrowed(batches.first)[view], slot,
                    nbytes, VideoUses(videos, _joined(numbers, np.int64), loose, runs,
                                      _joined(run_of, np.int32),
                                      _joined(group, np.int32)))


def leaf_total(plan: WindowPlan) -> int:
    """`leaf_rows(plan).total` without the rows, a run of videos at a time: whether a window
    needs pruning (a window of 1.25M clips held its rows, ~60 bytes a clip, to add them)."""
    batches, total = _Batches(plan), 0
    for run in _runs(plan.videos):
        if not isinstance(run, ColumnRun):
            total += int(_loose_columns(run[1].uses, batches, 0)[2].sum())
            continue
        for start in range(run.start, run.end, _TOTAL_RUN):  # a window planned whole: one run
            end = min(start + _TOTAL_RUN, run.end)
            piece = run._replace(start=start, end=end,
                                 paths=run.paths[start - run.start:end - run.start])
            total += int(batches.run_columns(piece, 0)[2].sum())
    return total


_TOTAL_RUN = 4096  # videos summed at a time


def _runs(videos: object) -> Iterable:
    """The window's videos as `WindowVideos.column_runs` gives them, or (path, work) pairs."""
    return videos.column_runs() if isinstance(videos, WindowVideos) else videos.items()


# a clip's view, slot, nbytes and video: narrow, as a window of 1.25M clips holds them all
_DTYPES = (np.int32, np.uint16, np.int64, np.int32)


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The parts as one array, each let go as it is copied: not held beside the whole."""
    whole = np.concatenate(parts) if parts else np.zeros(0, dtype)
    parts.clear()
    return whole


def _narrowed(values: np.ndarray) -> np.ndarray:
    """`values` as int32 where all of them fit, else as they are."""
    info = np.iinfo(np.int32)
    if not len(values) or (values.min() >= info.min and values.max() <= info.max):
        return values.astype(np.int32)
    return values


class _Batches:
    """A window's batches as `leaf_rows` reads them: their keys in `views`' order, each one's
    first reader position and output frame bytes (from its rows' columns where the window's
    mappings are rows, `plan.batchrows`), and each use's batch index and frame count from a
    chunk's use columns."""

    def __init__(self, plan: WindowPlan) -> None:
        self._plan = plan
        views = plan.views
        self._table = table = views.table if isinstance(views, RowMap) else None
        self.keys = keys = _Keys(table, views)
        row = np.concatenate((keys.rows, np.full(len(keys.extra), -1, np.int64)))
        rows = int(row.max(initial=-1)) + 1
        self._at_row = np.full(rows, -1, np.int64)  # a table row's batch index
        self._at_row[row[row >= 0]] = np.flatnonzero(row >= 0)
        self._index: dict | None = None
        self.first = np.zeros(len(keys), np.int64)
        self.frame_bytes = np.zeros(len(keys), np.int64)
        by_row = np.flatnonzero(row >= 0)
        readers = plan.readers
        slow_first: Iterable[int] = range(len(keys))  # not a set: a window's batches
        slow_bytes: Iterable[int] = slow_first
        if table is not None and rows:
            plans, owner = table.owners(rows)
            per_plan = np.array([out_frame_nbytes(p) for p in plans], np.int64)
            self.frame_bytes[by_row] = per_plan[owner[row[by_row]]]
            slow_bytes = set(np.flatnonzero(row < 0).tolist()) | self._indices(views.changed())
            if isinstance(readers, RowMap) and readers.table is table:
                self.first[by_row] = table.first_positions(rows)[row[by_row]]
                slow_first = set(np.flatnonzero(row < 0).tolist()) | self._indices(
                    readers.changed())
        for index in slow_first:  # a key held beside the rows, or changed since
            self.first[index] = min((p for _, p in readers[self.keys[index]]), default=0)
        for index in slow_bytes:
            self.frame_bytes[index] = out_frame_nbytes(views[self.keys[index]][0])
        self._last: tuple[UseColumns, tuple] | None = None  # `_row_columns`' chunk
        self._counts: dict[int, tuple[ClipTable, np.ndarray]] = {}  # `_table_counts`

    def index(self) -> dict:
        """Each key's batch index, made when a batch is not found by its row."""
        if self._index is None:
            self._index = {key: index for index, key in enumerate(self.keys)}
        return self._index

    def _indices(self, keys: set) -> set[int]:
        if not keys:
            return set()
        index = self.index()
        return {index[key] for key in keys if key in index}

    def run_columns(self, run: ColumnRun, base: int) -> tuple[np.ndarray, ...]:
        """(batch index, slot, nbytes, video) of each use of a run of a chunk's videos, its
        videos numbered from `base`."""
        columns = run.columns
        starts = np.frombuffer(columns.starts, np.dtype(columns.starts.typecode))[
            run.start:run.end + 1]
        low, high = int(starts[0]), int(starts[-1])
        batch = np.frombuffer(columns.batch, np.int32)[low:high]
        slot = np.frombuffer(columns.slot, np.dtype(columns.slot.typecode))[low:high]
        video = np.repeat(np.arange(base, base + run.end - run.start, dtype=np.int32),
                          np.diff(starts))
        if run.gone is not None:
            held = np.frombuffer(bytes(run.gone), np.uint8)[batch] == 0
            batch, slot, video = batch[held], slot[held], video[held]
        views, which, start, tables = self._row_columns(columns)
        view = views[batch]
        missing = np.flatnonzero(view < 0)
        if len(missing):  # as a dict would: a use of a batch the window does not hold
            raise KeyError(columns.table.key(int(batch[missing[0]])))
        counts = self._use_counts(columns.table, tables, which[batch], start[batch] + slot,
                                  batch, slot)
        return view, slot, self.frame_bytes[view] * counts, video

    def _row_columns(self, columns: UseColumns) -> tuple:
        """Each of a chunk's batch rows' batch index (-1: not the window's), clip table (-1:
        clips of its own, or none) and first clip there, and the clip tables: from the rows'
        numbers in numpy, once a chunk (its runs come one after the other; no row made)."""
        if self._last is not None and self._last[0] is columns:
            return self._last[1]
        table, held = columns.table, columns.held
        tables, which, start = table.clip_rows(held)
        views = self._views_of(table, held, np.frombuffer(columns.batch, np.int32))
        found = views, which, start, tables
        self._last = columns, found
        return found

    def _use_counts(self, table: BatchColumns, tables: list[ClipTable], which: np.ndarray,
                    clip: np.ndarray, batch: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """Each use's frame count: its clip's row (`clip`) of its batch's clip table (`which`),
        or its batch's own clips."""
        counts = np.zeros(len(which), np.int64)
        order = np.argsort(which, kind="stable")
        for group in np.split(order, np.flatnonzero(np.diff(which[order])) + 1):
            if not len(group):
                continue
            number = int(which[group[0]])
            if number >= 0:
                counts[group] = self._table_counts(tables[number])[clip[group]]
                continue
            for at, row, use_slot in zip(group.tolist(), batch[group].tolist(),
                                         slot[group].tolist(), strict=True):
                clips = table.clips(row)  # clips of their own (a tuple)
                chosen = clips[use_slot] if clips is not None else None
                counts[at] = 0 if chosen is None else len(chosen.frame_indices)
        return counts

    def _table_counts(self, table: ClipTable) -> np.ndarray:
        """The frame count of each row of a clip table, once a window: a part's batches read
        the clip tables of the parts before (`plan_window`'s `resolved`), and counting every
        table a chunk reads, each chunk, held 1.18 GB at 250,000 videos in 512 parts
        (docs/performance.md#pruning-is-the-daemon-s-peak)."""
        found = self._counts.get(id(table))
        if found is None:
            found = self._counts[id(table)] = (table, _frame_counts(table).astype(np.int32))
        return found[1]

    def _views_of(self, table: BatchColumns, held: int, batch: np.ndarray) -> np.ndarray:
        """Each of the first `held` rows' index among the window's batches: by its row where
        it reads the window's table, else by its key where a use (`batch`) reads it (-1:
        none)."""
        views = np.full(held, -1, np.int32)
        if self._table is not None and table is self._table.columns:
            mine = min(held, len(self._at_row))
            views[:mine] = self._at_row[:mine]
        noted = np.zeros(held, bool)
        noted[batch] = True
        missing = np.flatnonzero((views < 0) & noted).tolist()
        if missing:
            index = self.index()
            views[missing] = [index.get(table.key(row), -1) for row in missing]
        return views


class _Keys(Sequence):
    """The window's batches' keys in `views`' order, each made when read: those at a row of
    the window's table (`rows`), then those held beside them (`extra`); a list of them made
    156,000 keys at 250,000 videos that only a changed window's batches read."""

    def __init__(self, table: BatchRows | None, views: object) -> None:
        self._table = table
        found, self.extra = array("q"), []
        pairs = views.keyed_rows() if table is not None else ((k, -1) for k in views)
        for key, row in pairs:  # a row's keys come first (`RowMap.keyed_rows`)
            if row >= 0:
                found.append(row)
            else:
                self.extra.append(key)
        self.rows = np.frombuffer(found, np.int64) if found else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.rows) + len(self.extra)

    def __getitem__(self, index):  # type: ignore[override]  # an int only
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        if index < len(self.rows):
            return self._table.key(int(self.rows[index]))  # type: ignore[union-attr]
        return self.extra[index - len(self.rows)]


def _frame_counts(table: ClipTable) -> np.ndarray:
    """len(frame_indices) of each row's clip of a table."""
    lengths = np.fromiter(map(len, table._frames), np.int64, len(table._frames))
    return lengths[np.asarray(table.frames, np.int64)]


def _loose_columns(uses: Sequence[ClipUse], batches: _Batches, base: int
                   ) -> tuple[np.ndarray, ...]:
    """(batch index, slot, nbytes, video) of each of a video's uses, a use at a time."""
    index = batches.index()
    if isinstance(uses, ColumnUses):
        found = [(index[r.view], s, frame_count(r.clips, s)) for r, s in zip(*uses.columns,
                                                                             strict=True)]
    else:
        found = [(index[u.view], u.slot, len(u.clip.frame_indices)) for u in uses]
    rows = np.array(found, np.int64).reshape(len(found), 3)
    view = rows[:, 0]
    return view, rows[:, 1], batches.frame_bytes[view] * rows[:, 2], np.full(
        len(uses), base, np.int64)


class VideoUses(Sequence):
    """Each video's uses (`leaf_rows`' order), made when asked for: its group's of a run of
    the window's columns (`runs`, a run's index and its group a video), or those held (`loose`,
    run -1)."""

    def __init__(self, videos: object, numbers: np.ndarray, loose: dict[int, Sequence[ClipUse]],
                 runs: list[ColumnRun], run: np.ndarray, group: np.ndarray) -> None:
        self._videos, self._numbers, self._loose = videos, numbers, loose
        self._runs, self._run, self._group = runs, run, group

    def __len__(self) -> int:
        return len(self._numbers)

    def __getitem__(self, index):  # type: ignore[override]  # an int only
        number = int(self._numbers[index])
        if number < 0:
            return self._loose[index]
        return self._videos.group_uses(number)  # type: ignore[attr-defined]

    def ranges(self, indices: np.ndarray) -> tuple[UseColumns, np.ndarray, np.ndarray] | None:
        """These videos' uses as ranges [start, end) of one window's use columns, with no
        `WindowUses` made a video; None where some are not (held, left out in part)."""
        runs = np.unique(self._run[indices])
        if not len(runs) or runs[0] < 0:
            return None
        found = [self._runs[run] for run in runs.tolist()]
        columns = found[0].columns
        if any(run.columns is not columns or run.gone is not None for run in found):
            return None
        starts = np.frombuffer(columns.starts, np.dtype(columns.starts.typecode))
        group = self._group[indices]
        return columns, starts[group], starts[group + 1]
