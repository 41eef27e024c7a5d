"""A window's clips as columns: for each clip its video, sample, stream and the indices of its
frame list, ops and path among the distinct ones the window holds. A batch's clips are a range
of rows (`TableClips`), and a `StreamClip` is made from its row when one is looked at, equal
to the one the plan resolved: a clip's record and its place in its batch's tuple were 88 of a
window's bytes a clip (docs/performance.md#planning-and-scheduling-at-scale).

A table holds the batches resolved between two stop checks (up to 1,024,
`VIEWS_PER_STOP_CHECK`): one batch kept past its window (a `ViewState`, a reader's held view)
keeps that whole table alive, up to 1,024 batches' rows and frame lists.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from sandfs.plan.records import StreamClip

_new_clip = tuple.__new__  # a StreamClip without its __new__'s call


def distinct(objects: Sequence) -> tuple[list, array]:
    """The distinct objects and each one's index among them. By identity, in numpy: the plan
    interns equal parts of clips (`TaskPlan.shared`), and hashing a clip's tuple of frames
    cost more than an equal value kept twice where its interner was cleared."""
    ids = np.fromiter(map(id, objects), np.int64, len(objects))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    found = array("i")  # int32: its callers read it with numpy as such
    found.frombytes(inverse.astype(np.int32).tobytes())
    return [objects[i] for i in first.tolist()], found


# an `array`'s typecodes, narrowest first, and their numpy types
_CODES = (("B", np.uint8), ("H", np.uint16), ("i", np.int32))


def _column(values) -> array:
    """Non-negative ints as an `array` of the narrowest type that holds them (its items
    Python ints when read, as a clip's are): a table's columns were 22 bytes a clip as
    int32s, most of them small (a sample, a stream, an index among a few hundred)."""
    values = np.asarray(values, np.int64).ravel()
    top = int(values.max()) if len(values) else 0
    if len(values) and int(values.min()) < 0:
        raise ValueError(f"a negative value ({int(values.min())}) in a clip table's column")
    code, dtype = next((c, t) for c, t in _CODES if top <= np.iinfo(t).max)
    made = array(code)
    made.frombytes(values.astype(dtype).tobytes())
    return made


class ClipTable:
    """The clips of the batches one planning pass resolved (a window or a part of one), a row
    each, made at once and never changed."""

    __slots__ = ("_frames", "_ops", "_paths", "frames", "ops", "path", "sample", "stream",
                 "video")

    def __init__(self, clips: Sequence[StreamClip]) -> None:
        video, sample, stream, frames, ops, paths = zip(*clips, strict=True) if clips else (
            (),) * 6
        self.video, self.sample, self.stream = _column(video), _column(sample), _column(stream)
        (self._frames, frames), (self._ops, ops), (self._paths, paths) = map(
            distinct, (frames, ops, paths))
        self.frames, self.ops, self.path = _column(frames), _column(ops), _column(paths)

    @classmethod
    def of_columns(cls, video: np.ndarray, sample: np.ndarray, stream: np.ndarray,
                   frames: tuple[list, np.ndarray], ops: tuple[list, np.ndarray],
                   paths: tuple[list, np.ndarray]) -> ClipTable:
        """A table made from its columns: (distinct objects, each row's index among them) for
        frames, ops and paths, as `distinct` gives them."""
        table = cls.__new__(cls)
        table.video, table.sample, table.stream = _column(video), _column(sample), _column(stream)
        table._frames, table.frames = frames[0], _column(frames[1])
        table._ops, table.ops = ops[0], _column(ops[1])
        table._paths, table.path = paths[0], _column(paths[1])
        return table

    @classmethod
    def of(cls, batches: Sequence[Sequence[StreamClip]]) -> list[TableClips]:
        """Each batch's clips as rows of one new table."""
        table = cls([clip for clips in batches for clip in clips])
        made, start = [], 0
        for clips in batches:
            made.append(TableClips(table, start, len(clips)))
            start += len(clips)
        return made

    def __len__(self) -> int:
        return len(self.video)

    def clip(self, row: int) -> StreamClip:
        return _new_clip(StreamClip, (self.video[row], self.sample[row], self.stream[row],
                                      self._frames[self.frames[row]], self._ops[self.ops[row]],
                                      self._paths[self.path[row]]))

    def frames_and_source(self, row: int) -> tuple[tuple[int, ...], tuple | None]:
        """(frame_indices, source) of a row's clip, without the clip made."""
        return self._frames[self.frames[row]], self._paths[self.path[row]].source

    def frame_count(self, row: int) -> int:
        """len(frame_indices) of a row's clip, without the clip made."""
        return len(self._frames[self.frames[row]])


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


def table_clips(table: ClipTable, start: int, count: int) -> TableClips:
    """`TableClips` for rows known to be the table's (a window's batch rows make one whenever
    a batch's clips are read): unchecked."""
    clips = _new_object(TableClips)
    clips.table, clips.start, clips.count = table, start, count
    return clips


_new_object = object.__new__


def frame_count(clips: Sequence[StreamClip], index: int) -> int:
    """len(frame_indices) of a batch's clip, read from its table where it has one."""
    if isinstance(clips, TableClips):
        return clips.table.frame_count(clips.start + index)
    return len(clips[index].frame_indices)


def clip_frames(clips: Sequence[StreamClip], index: int) -> tuple[tuple[int, ...], tuple | None]:
    """(frame_indices, source) of a batch's clip, read from its table where it has one."""
    if isinstance(clips, TableClips):
        return clips.table.frames_and_source(clips.start + index)
    clip = clips[index]
    return clip.frame_indices, clip.source


def clip_videos(clips: Sequence[StreamClip]) -> Sequence[int]:
    """Each clip's video_index, read from its table's column where it has one."""
    if isinstance(clips, TableClips):
        return clips.table.video[clips.start:clips.start + clips.count]
    return [clip.video_index for clip in clips]
