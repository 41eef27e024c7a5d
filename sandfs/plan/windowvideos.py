"""A window's videos as columns, not a record and a dict entry a video: its uses grouped by video
(`UseColumns`), each video's probe and plan by its group, and its path found by the path's hash
(one sorted column of hashes a window, whatever its parts: 12 bytes a video). A video's
`VideoWork` is made when it is looked up; a `VideoWork` and its dict entry were ~17 bytes a
clip of a window (5 clips a video; docs/performance.md#a-windows-batches-and-the-board). The
rest of a window planned in parts joins as columns too (a chunk); what changes later (a task
joining adds uses, a task leaving takes uses) is held beside the columns as records, as before.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import (
    Callable,
    ItemsView,
    Iterator,
    MutableMapping,
    Sequence,
    ValuesView,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sandfs.plan.hashrows import HashNumbers, hashes_of
from sandfs.plan.uses import ClipUse, UseColumns, frame_rows, kept

if TYPE_CHECKING:
    from sandfs.media.types import VideoInfo
    from sandfs.plan.task import TaskPlan
    from sandfs.plan.window import ViewKey


@dataclass(slots=True)
class VideoWork:
    info: VideoInfo
    plan: TaskPlan  # a plan that knows this video (for its ops and layout)
    window: int
    # `Uses` or a tuple: replaced, never changed in place (the board's pending clips may be it)
    uses: Sequence[ClipUse] = ()

    @property
    def frames(self) -> set[int]:
        return {i for _, _, frames, _ in frame_rows(self.uses) for i in frames}

    @property
    def frame_keys(self) -> set[tuple]:
        """(index, source) of every frame the uses need: a frame wanted at full size and
        scaled in the decoder (decode_resize) is two objects from one decode."""
        return {(i, source) for _, _, frames, source in frame_rows(self.uses) for i in frames}


class ColumnRun(NamedTuple):
    """Videos `start` to `end` of a chunk (numbered from `first`) read as its columns; `gone`:
    a byte a batch row, its uses left out (None: none)."""

    columns: UseColumns
    gone: bytearray | None
    first: int
    start: int
    end: int
    paths: list[str]


class ColumnVideo:
    """A video of a window's columns as its `VideoWork` reads, made on demand: setting its
    `uses` replaces them in the window (a record from then on)."""

    __slots__ = ("_number", "_read", "_videos")

    def __init__(self, videos: WindowVideos, number: int) -> None:
        self._videos, self._number = videos, number
        self._read: Sequence[ClipUse] | None = None  # its columns' uses, once read

    @property
    def info(self) -> VideoInfo:
        return self._videos.info_of(self._number)

    @property
    def plan(self) -> TaskPlan:
        return self._videos.plan_of_video(self._number)

    @property
    def window(self) -> int:
        return self._videos.window

    @property
    def uses(self) -> Sequence[ClipUse]:
        """Its record's uses where they were replaced since, else its columns' (which never
        change: read once, as pruning reads a video's uses a few times)."""
        record = self._videos._records.get(self._number)
        if record is not None:
            return record.uses
        if self._read is None:
            self._read = self._videos.group_uses(self._number)
        return self._read

    @uses.setter
    def uses(self, uses: Sequence[ClipUse]) -> None:
        self._videos.replace(self._number, VideoWork(self.info, self.plan, self.window, uses))

    frames = VideoWork.frames
    frame_keys = VideoWork.frame_keys

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ColumnVideo | VideoWork):
            return NotImplemented
        return (self.info, self.plan, self.window) == (other.info, other.plan, other.window) and (
            list(self.uses) == list(other.uses))

    __hash__ = None  # type: ignore[assignment]  # as VideoWork's

    def __repr__(self) -> str:  # not the dataclass's: its fields are read from the columns
        return (f"ColumnVideo({self.info.path!r}, window={self.window}, "
                f"uses={len(self.uses)}, number={self._number})")


class _Chunk:
    """One planned part's videos, numbered from `first` in the window: its uses' columns, and
    each video's probe and plan (an index into the window's plans)."""

    __slots__ = ("columns", "first", "infos", "plan_of")

    def __init__(self, columns: UseColumns, infos: list[VideoInfo], plan_of: array,
                 first: int) -> None:
        self.columns, self.infos, self.plan_of, self.first = columns, infos, plan_of, first


class PathIndex:
    """A window's videos' numbers by path, as planned at once (`WindowVideos.path_index`)."""

    __slots__ = ("_index", "_infos")

    def __init__(self, index: HashNumbers, infos: list[VideoInfo]) -> None:
        self._index, self._infos = index, infos

    def number(self, path: str) -> int:
        for number in self._index.numbers(path):
            if self._infos[number].path == path:  # not a collision
                return number
        return -1


class WindowVideos(MutableMapping[str, "VideoWork | ColumnVideo"]):
    """A window's videos by path, in the order their first uses were planned: the groups of
    its parts' `UseColumns` (chunks), each with its probe and plan, numbered in that order,
    and the videos added since (`VideoWork`s, after them). A video whose uses were replaced
    is a record from then on; a snapshot leaves the uses of some batches out (a byte a batch),
    and a video with none left is not in the mapping."""

    def __init__(self, window: int, columns: UseColumns, infos: Sequence[VideoInfo],
                 plans: Sequence[TaskPlan], plan_of: Sequence[int]) -> None:
        if not len(columns) == len(infos) == len(plan_of):
            raise ValueError(f"{len(columns)} groups, {len(infos)} probes, {len(plan_of)} plans")
        self.window, self.plans = window, list(plans)
        self._chunks: list[_Chunk] = []
        self._firsts: list[int] = []  # each chunk's first number
        self._count = 0  # videos numbered
        self._index = HashNumbers()  # every chunk's videos' numbers by path: one a window
        self._records: dict[int, VideoWork] = {}  # videos whose uses were replaced
        self._added: dict[str, VideoWork] = {}  # videos in no chunk
        self._gone: dict[int, bytearray] = {}  # by chunk: a byte a batch row, its uses left out
        self._empty: set[int] = set()  # videos with no use left (`_gone`), deleted or merged
        self._add_chunk(columns, list(infos), array("H", plan_of))

    def _add_chunk(self, columns: UseColumns, infos: list[VideoInfo], plan_of: array,
                   hidden: Sequence[int] = ()) -> _Chunk:
        """A chunk joins, its videos but those `hidden` (found in an earlier chunk) in the
        index: merged in one pass, not a sort of the window's each part."""
        first = self._count
        hashes = hashes_of((info.path for info in infos), len(infos))
        numbers = np.arange(first, first + len(infos))
        if len(hidden):
            shown = np.ones(len(infos), bool)
            shown[list(hidden)] = False
            hashes, numbers = hashes[shown], numbers[shown]
        self._index = self._index.joined(hashes, numbers)
        chunk = _Chunk(columns, infos, plan_of, first)
        self._chunks.append(chunk)
        self._firsts.append(first)
        self._count += len(infos)
        return chunk

    # -- reading ----------------------------------------------------------------------------

    def _chunk(self, number: int) -> _Chunk:
        return self._chunks[bisect_right(self._firsts, number) - 1]

    def _only(self) -> _Chunk:
        if len(self._chunks) != 1:
            raise ValueError(f"a window planned in {len(self._chunks)} parts has no one column")
        return self._chunks[0]

    @property
    def columns(self) -> UseColumns:
        """The uses' columns of a window planned at once (one chunk)."""
        return self._only().columns

    @property
    def infos(self) -> list[VideoInfo]:
        return self._only().infos

    @property
    def unchanged(self) -> bool:
        """Every video is its group as planned at once, in order: none replaced, added, left
        out, and no part joined."""
        return len(self._chunks) == 1 and not (
            self._records or self._added or self._empty or self._gone)

    def path_index(self) -> PathIndex:
        """The paths of a window planned at once, as they are now (a later part joining
        does not change it)."""
        return PathIndex(self._index, self._only().infos)

    def info_of(self, number: int) -> VideoInfo:
        chunk = self._chunk(number)
        return chunk.infos[number - chunk.first]

    def plan_of_video(self, number: int) -> TaskPlan:
        chunk = self._chunk(number)
        return self.plans[chunk.plan_of[number - chunk.first]]

    def group_of(self, path: str) -> int:
        """The number of the video `path` in the chunks: the one with uses left where a video
        deleted was planned again in a later chunk, else the first (-1: none, or added
        since)."""
        found = -1
        for number in self._index.numbers(path):
            if self.info_of(number).path != path:  # a collision
                continue
            if number not in self._empty:
                return number
            found = number if found < 0 else found
        return found

    def groups_of(self, paths: Sequence[str]) -> np.ndarray:
        """Each path's number (`group_of`; -1: none), the hashes searched at once."""
        found = np.full(len(paths), -1, np.int64)
        for index in self._index.held(hashes_of(paths, len(paths))):
            found[index] = self.group_of(paths[index])
        return found

    def group_uses(self, number: int) -> Sequence[ClipUse]:
        """The uses of a video of the chunks (those of batches not left out)."""
        record = self._records.get(number)
        if record is not None:
            return record.uses
        at = bisect_right(self._firsts, number) - 1
        chunk = self._chunks[at]
        columns, group = chunk.columns, number - chunk.first
        uses = columns.group(group)
        gone = self._gone.get(at)
        if gone is None:
            return uses
        rows = columns.batch[columns.starts[group]:columns.starts[group + 1]]
        mask = [not gone[row] for row in rows]
        return uses if all(mask) else uses.select(mask)

    def __getitem__(self, path: str) -> VideoWork | ColumnVideo:
        added = self._added.get(path)
        if added is not None:
            return added
        number = self.group_of(path)
        if number < 0 or number in self._empty:
            raise KeyError(path)
        return self._records.get(number) or ColumnVideo(self, number)

    def __iter__(self) -> Iterator[str]:
        return (path for path, _ in self._walk())

    def _walk(self) -> Iterator[tuple[str, int]]:
        """(path, number) of each video of the chunks, in order; then the added ones' (-1)."""
        empty = self._empty
        for chunk in list(self._chunks):
            first = chunk.first
            if empty:
                yield from ((info.path, first + group) for group, info in enumerate(chunk.infos)
                            if first + group not in empty)
            else:
                yield from ((info.path, first + group) for group, info in enumerate(chunk.infos))
        yield from ((path, -1) for path in list(self._added))

    def _items(self) -> Iterator[tuple[str, VideoWork | ColumnVideo]]:
        """Each video, found by its number as the walk goes: no path looked up."""
        records, added = self._records, self._added
        for path, number in self._walk():
            if number < 0:
                yield path, added[path]
            else:
                yield path, records.get(number) or ColumnVideo(self, number)

    def column_runs(self) -> Iterator[ColumnRun | tuple[str, VideoWork]]:
        """The videos in `items`' order: runs of a chunk's groups read as its columns, and
        the videos held as records or added, (path, work), one at a time."""
        for at, chunk in enumerate(list(self._chunks)):
            first, count, gone = chunk.first, len(chunk.infos), self._gone.get(at)
            breaks = sorted(n - first for n in {*self._records, *self._empty}
                            if first <= n < first + count)
            start = 0
            for end in [*breaks, count]:
                if start < end:
                    yield ColumnRun(chunk.columns, gone, first, start, end,
                                    [info.path for info in chunk.infos[start:end]])
                record = self._records.get(first + end)
                if end < count and record is not None and first + end not in self._empty:
                    yield chunk.infos[end].path, record
                start = end + 1
        yield from list(self._added.items())

    def items(self) -> ItemsView[str, VideoWork | ColumnVideo]:
        return _Items(self)

    def values(self) -> ValuesView[VideoWork | ColumnVideo]:
        return _Values(self)

    def __len__(self) -> int:
        return self._count - len(self._empty) + len(self._added)

    def __contains__(self, path: object) -> bool:
        if path in self._added:
            return True
        number = self.group_of(path)  # type: ignore[arg-type]
        return number >= 0 and number not in self._empty

    # -- changing ---------------------------------------------------------------------------

    def replace(self, number: int, work: VideoWork) -> None:
        """A video's record from now on: `work` (its uses replaced)."""
        self._records[number] = work

    def __setitem__(self, path: str, work: VideoWork | ColumnVideo) -> None:
        if isinstance(work, ColumnVideo):
            work = VideoWork(work.info, work.plan, work.window, work.uses)
        number = self.group_of(path)
        if number >= 0 and number not in self._empty and path not in self._added:
            self._records[number] = work  # in its place, as a dict's value replaced
        else:  # a new key, or one deleted: at the end
            self._added[path] = work

    def __delitem__(self, path: str) -> None:
        if self._added.pop(path, None) is not None:
            return
        number = self.group_of(path)
        if number < 0 or number in self._empty:
            raise KeyError(path)
        self._records.pop(number, None)
        self._empty.add(number)

    def join(self, rest: WindowVideos) -> None:
        """The videos of the window's rest, planned after this part, as a chunk of their
        columns: a video here already (a stand-in's clips in a bad video's slots, planned
        with that video's part) gets the rest's uses after its own."""
        chunk = rest._only()
        paths = [info.path for info in chunk.infos]
        found, empty, added = self.groups_of(paths).tolist(), self._empty, self._added
        hidden = [group for group, (path, number) in enumerate(zip(paths, found, strict=True))
                  if (number >= 0 and number not in empty) or path in added]
        for group in hidden:  # before the chunk joins: these are the earlier videos
            found = self[paths[group]]
            found.uses = found.uses + chunk.columns.group(group)  # not in place: the board's
        numbers = {id(plan): i for i, plan in enumerate(self.plans)}
        for plan in rest.plans:
            if id(plan) not in numbers:
                numbers[id(plan)] = len(self.plans)
                self.plans.append(plan)
        mine = [numbers[id(plan)] for plan in rest.plans]
        joined = self._add_chunk(chunk.columns, chunk.infos,
                                 array("H", (mine[i] for i in chunk.plan_of)), hidden)
        self._empty.update(joined.first + group for group in hidden)

    def kept_only(self, wanted: Callable[[ViewKey], bool]) -> WindowVideos:
        """A copy with the uses of batches `wanted` only, and only the videos left some: the
        chunks shared, their uses left out a batch at a time (a byte a batch), no record made
        but for those held as records already."""
        copy = WindowVideos.__new__(WindowVideos)
        copy.window, copy.plans, copy._chunks = self.window, list(self.plans), list(self._chunks)
        copy._firsts, copy._count, copy._index = list(self._firsts), self._count, self._index
        copy._gone, copy._empty = {}, set(self._empty)
        for at, chunk in enumerate(self._chunks):
            gone = bytearray(not wanted(key) for key in chunk.columns.rows.views())
            if at in self._gone:
                gone = bytearray(a | b for a, b in zip(gone, self._gone[at], strict=True))
            if any(gone):
                copy._gone[at] = gone
                copy._empty.update(chunk.first + g for g in _emptied(chunk.columns, gone))
        copy._records = {}
        for number, work in list(self._records.items()):
            uses = kept(work.uses, wanted)
            copy._empty.discard(number)
            if uses and number not in self._empty:
                copy._records[number] = VideoWork(work.info, work.plan, work.window, uses)
            else:
                copy._empty.add(number)
        copy._added = {}
        for path, work in list(self._added.items()):
            uses = kept(work.uses, wanted)
            if uses:
                copy._added[path] = VideoWork(work.info, work.plan, work.window, uses)
        return copy


class _Items(ItemsView):
    def __iter__(self):
        return self._mapping._items()


class _Values(ValuesView):
    def __iter__(self):
        return (work for _, work in self._mapping._items())


def join_videos(base: MutableMapping[str, VideoWork | ColumnVideo],
                rest: MutableMapping[str, VideoWork | ColumnVideo]) -> None:
    """The rest of a window planned in parts joins its earlier part's videos: as a chunk of
    columns where both are, else a video at a time."""
    if isinstance(base, WindowVideos) and isinstance(rest, WindowVideos) and rest.unchanged:
        base.join(rest)
        return
    for path, work in rest.items():
        found = base.get(path)
        if found is None:
            base[path] = work
        else:  # a stand-in's clips in a bad video's slots, planned with that video's part
            found.uses = found.uses + work.uses  # not in place: the board's pending list


def _emptied(columns: UseColumns, gone: bytearray) -> set[int]:
    """The groups all of whose uses are in batches `gone`."""
    alive = ~np.frombuffer(gone, bool)[np.frombuffer(columns.batch, np.int32)]
    return set(np.flatnonzero(group_counts(alive, columns) == 0).tolist())


def group_counts(counted: np.ndarray, columns: UseColumns) -> np.ndarray:
    """Each group's uses `counted` (a bool a use): a running sum read at the groups' starts,
    an empty group 0 wherever it stands (`np.add.reduceat` raises on one at the end)."""
    starts = np.frombuffer(columns.starts, columns.starts.typecode)
    total = np.concatenate(([0], np.cumsum(counted, dtype=np.int64)))
    return total[starts[1:]] - total[starts[:-1]]
