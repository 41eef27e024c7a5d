"""What pruning reads of a window, a chunk of videos at a time (`pruning.pruned_plans`), found
once a window however many chunks read it: the clip tables' frame-list and source columns
stacked (int32: 8 bytes a clip of the window), each batch row's place in them and output frame
bytes, and a chunk's frame indices read from the frame lists its own clips use. A chunk's uses
read the rows of nearly every table and batch (a video's clips are in batches across the
window): every table's frame lists read for each chunk were a window's frame indices (1.25M
clips: 20M), and a batch's row and key read once a video of it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sandfs.cache.flatprune import gather
from sandfs.media.types import VideoInfo
from sandfs.plan.cliptable import ClipTable
from sandfs.plan.uses import ClipUse, UseColumns
from sandfs.plan.window import WindowPlan
from sandfs.plan.windowvideos import ColumnRun, WindowVideos
from sandfs.sched.leafrows import out_frame_nbytes
from sandfs.sched.objects import frame_nbytes as decoded_nbytes
from sandfs.sched.objects import use_ranges


@dataclass(frozen=True, slots=True)
class UseRows:
    """A chunk's uses as columns, a row each, grouped by video in the order of its uses."""

    video: np.ndarray
    source: np.ndarray  # an index into `sources`
    sources: list  # the distinct sources
    frame_nbytes: np.ndarray  # one frame's, decoded
    out_nbytes: np.ndarray  # the clip's
    lengths: np.ndarray  # frame indices a clip
    indices: np.ndarray  # the clips' frame indices, concatenated


@dataclass(frozen=True, slots=True)
class Chunk:
    """A chunk of a window's videos read: their uses as columns (None: a batch's clips are
    not a table's), and each video's path, probe and uses."""

    rows: UseRows | None
    paths: list[str]
    infos: list[VideoInfo]
    uses: Sequence[Sequence[ClipUse]]


class StackedTables:
    """Clip tables' rows stacked, each table's after those found before it."""

    __slots__ = ("_at", "_list_base", "_numbers", "_row_base", "frame_list", "source", "tables")

    def __init__(self) -> None:
        self.tables: list[ClipTable] = []
        self._at: dict[int, int] = {}  # id of a table (held in `tables`) -> its index
        self._row_base = [0]  # where each table's rows start, and their end
        self._list_base = np.zeros(1, np.int64)  # each table's first frame list's number
        self.frame_list = np.zeros(0, np.int32)  # each row's frame list, numbered as stacked
        self.source = np.zeros(0, np.int32)  # each row's source: an index into `sources`
        self._numbers: dict[tuple | None, int] = {}  # a source -> its index

    @property
    def sources(self) -> list[tuple | None]:
        """The distinct sources of the tables' rows."""
        return list(self._numbers)

    def rows(self, tables: Sequence[ClipTable]) -> np.ndarray:
        """Where each of these distinct tables' rows start in the stacked columns, those not
        found before stacked now."""
        new = [table for table in tables if id(table) not in self._at]
        if new:
            self._stack(new)
        return np.array([self._row_base[self._at[id(table)]] for table in tables], np.int64)

    def _stack(self, new: list[ClipTable]) -> None:
        lists, frames, sources = [int(self._list_base[-1])], [self.frame_list], [self.source]
        numbers = self._numbers
        for table in new:
            self._at[id(table)] = len(self.tables)
            self.tables.append(table)
            self._row_base.append(self._row_base[-1] + len(table))
            frames.append(np.asarray(table.frames).astype(np.int32) + lists[-1])
            lists.append(lists[-1] + len(table._frames))
            of_path = np.array([numbers.setdefault(path.source, len(numbers))
                                for path in table._paths], np.int32)
            sources.append(of_path[np.asarray(table.path)] if len(table) else of_path[:0])
        self.frame_list, self.source = np.concatenate(frames), np.concatenate(sources)
        self._list_base = np.concatenate((self._list_base, lists[1:]))

    def frames(self, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The frame count of each of these frame lists (stacked numbers), and their frame
        indices concatenated: each distinct list read once."""
        lists, inverse = np.unique(which, return_inverse=True)
        table = np.searchsorted(self._list_base, lists, "right") - 1
        found = [self.tables[t]._frames[n] for t, n in zip(
            table.tolist(), (lists - self._list_base[table]).tolist(), strict=True)]
        lengths = np.fromiter(map(len, found), np.int64, len(found))
        flat = np.fromiter(itertools.chain.from_iterable(found), np.int64, int(lengths.sum()))
        return lengths[inverse], gather(flat, np.concatenate(([0], np.cumsum(lengths))), inverse)


class WindowReader:
    """A window's chunks of columns read in numpy (`ColumnRun`s), each batch row's place in
    the stacked tables and output frame bytes found once."""

    def __init__(self, plan: WindowPlan) -> None:
        self.plan = plan
        self.tables = StackedTables()
        # by id of a chunk's `UseColumns` (held here): each batch row's first clip's row in
        # the stacked tables (-1: not a table's) and output frame bytes (-1: not found yet)
        self._rows: dict[int, tuple[UseColumns, np.ndarray, np.ndarray]] = {}

    def run_chunk(self, run: ColumnRun) -> Chunk:
        """A run of a chunk's videos read from its columns."""
        videos = self.plan.videos
        assert isinstance(videos, WindowVideos)  # a `ColumnRun` is one's
        columns, numbers = run.columns, range(run.first + run.start, run.first + run.end)
        starts = np.frombuffer(columns.starts, np.dtype(columns.starts.typecode))[
            run.start:run.end + 1].astype(np.int64)
        batch = np.frombuffer(columns.batch, np.int32)[starts[0]:starts[-1]]
        slot = np.frombuffer(columns.slot, np.dtype(columns.slot.typecode))[
            starts[0]:starts[-1]].astype(np.int64)
        counts = np.diff(starts)
        if run.gone is None:
            uses = use_ranges(columns, starts[:-1], starts[1:])
        else:  # uses of batches left out: not the video's
            held = np.frombuffer(run.gone, np.uint8)[batch] == 0
            batch, slot = batch[held], slot[held]
            total = np.concatenate(([0], np.cumsum(held)))
            counts = total[starts[1:] - starts[0]] - total[starts[:-1] - starts[0]]
            uses = [videos.group_uses(number) for number in numbers]
        infos = [videos.info_of(number) for number in numbers]
        places = self._places(columns, batch)
        if places is None:
            return Chunk(None, run.paths, infos, uses)
        row = places[0] + slot
        source = self.tables.source[row].astype(np.int64)
        lengths, indices = self.tables.frames(self.tables.frame_list[row])
        video = np.repeat(np.arange(len(infos)), counts)
        sources = self.tables.sources
        rows = UseRows(video, source, sources, use_frame_nbytes(infos, video, source, sources),
                       places[1] * lengths, lengths, indices)
        return Chunk(rows, run.paths, infos, uses)

    def _places(self, columns: UseColumns,
                batch: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Each use's batch's first clip's row in the stacked tables and one output frame's
        bytes; None where a batch's clips are not a table's."""
        found = self._rows.get(id(columns))
        if found is None:
            tables, which, start = columns.table.clip_rows(columns.held)
            bases = self.tables.rows(tables)
            place = np.where(which >= 0, bases[np.maximum(which, 0)] + start, -1) if len(
                bases) else np.full(len(which), -1, np.int64)
            found = self._rows[id(columns)] = (columns, place,
                                               np.full(len(place), -1, np.int64))
        _, place, nbytes = found
        if np.any(place[batch] < 0):
            return None
        views, key = self.plan.views, columns.table.key
        for row in np.unique(batch[nbytes[batch] < 0]).tolist():  # a batch once a window
            nbytes[row] = out_frame_nbytes(views[key(row)][0])
        return place[batch], nbytes[batch]


def use_frame_nbytes(infos: list[VideoInfo], video: np.ndarray, source: np.ndarray,
                     sources: list) -> np.ndarray:
    """A decoded frame's bytes, per use: they depend on the video and source only."""
    pair = video * max(1, len(sources)) + source
    distinct, inverse = np.unique(pair, return_inverse=True)
    nbytes = [decoded_nbytes(infos[p // len(sources)], (0, sources[p % len(sources)]))
              for p in distinct.tolist()]
    return np.array(nbytes, np.int64)[inverse] if nbytes else np.zeros(0, np.int64)
