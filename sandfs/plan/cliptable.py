"""A window's clips as columns: for each clip its video, sample, stream and the indices of its
frame list, ops and path among the distinct ones the window holds. A batch's clips are a range
of rows (`TableClips`), and a `StreamClip` is made from its row when one is looked at, equal
to the one the plan resolved: a clip's record and its place in its batch's tuple were 88 of a
window's bytes a clip (docs/performance.md#planning-and-scheduling-at-scale).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from sandfs.plan.records import StreamClip

_new_clip = tuple.__new__  # a StreamClip without its __new__'s call


class _Distinct:
    """Distinct objects once each, by index. Found by identity: the plan interns equal parts
    of clips (`TaskPlan.shared`), and hashing a tuple of frames at every clip cost more than
    an equal value kept twice where its interner was cleared."""

    __slots__ = ("_index", "values")

    def __init__(self) -> None:
        self.values: list = []
        self._index: dict[int, int] | None = {}  # by id(): each value is kept in `values`

    def seal(self) -> None:
        self._index = None

    @property
    def sealed(self) -> bool:
        return self._index is None

    def index(self, value) -> int:
        found = self._index.get(id(value))
        if found is None:
            found = self._index[id(value)] = len(self.values)
            self.values.append(value)
        return found


class ClipTable:
    """The clips of the batches one planning pass resolved (a window or a part of one), a row
    each; rows are added, never changed."""

    __slots__ = ("_frames", "_ops", "_paths", "frames", "ops", "path", "sample", "stream",
                 "video")

    def __init__(self) -> None:
        self.video, self.frames, self.ops = array("i"), array("i"), array("i")
        self.sample, self.stream, self.path = array("i"), array("H"), array("H")
        self._frames, self._ops, self._paths = _Distinct(), _Distinct(), _Distinct()

    def __len__(self) -> int:
        return len(self.video)

    @property
    def _columns(self) -> tuple[array, ...]:
        return self.video, self.sample, self.stream, self.frames, self.ops, self.path

    def add(self, clips: Sequence[StreamClip]) -> TableClips:
        """A batch's clips, as rows of the table."""
        if self._frames.sealed:
            raise RuntimeError("a sealed ClipTable takes no more rows")
        start = len(self.video)
        frames, ops, paths = self._frames.index, self._ops.index, self._paths.index
        rows = [(v, s, t, frames(f), ops(o), paths(p)) for v, s, t, f, o, p in clips]
        for column, values in zip(self._columns, zip(*rows, strict=True), strict=False):
            column.extend(values)
        return TableClips(self, start, len(rows))

    def seal(self) -> None:
        """No more rows: what found a value's index goes (a clip of its own ops, a random
        resized crop's, would keep ~100 bytes there)."""
        for distinct in (self._frames, self._ops, self._paths):
            distinct.seal()

    def clip(self, row: int) -> StreamClip:
        return _new_clip(StreamClip, (self.video[row], self.sample[row], self.stream[row],
                                      self._frames.values[self.frames[row]],
                                      self._ops.values[self.ops[row]],
                                      self._paths.values[self.path[row]]))

    def frame_count(self, row: int) -> int:
        """len(frame_indices) of a row's clip, without the clip made."""
        return len(self._frames.values[self.frames[row]])


class TableClips(Sequence[StreamClip]):
    """A batch's clips: rows `start` to `start + count` of a `ClipTable`. Equal to the tuple
    of its clips, as the `ViewPlan.clips` it stands for."""

    __slots__ = ("count", "start", "table")

    def __init__(self, table: ClipTable, start: int, count: int) -> None:
        if not 0 <= start <= start + count <= len(table):
            raise ValueError(f"rows {start}..{start + count} of a table of {len(table)}")
        self.table, self.start, self.count = table, start, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[StreamClip]:
        clip = self.table.clip
        return (clip(row) for row in range(self.start, self.start + self.count))

    @overload
    def __getitem__(self, index: int) -> StreamClip: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[StreamClip, ...]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"clip {index} of a batch of {self.count}")
        return self.table.clip(self.start + index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))  # as the tuple it equals

    def __reduce__(self):
        """Sent elsewhere as its tuple, not with its whole table."""
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return repr(tuple(self))


def frame_count(clips: Sequence[StreamClip], index: int) -> int:
    """len(frame_indices) of a batch's clip, read from its table where it has one."""
    if isinstance(clips, TableClips):
        return clips.table.frame_count(clips.start + index)
    return len(clips[index].frame_indices)
