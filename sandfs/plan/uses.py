"""A video's clips in a window as two columns, not an object each: the batch each clip is in (a
`ViewRow`, one a batch, shared by the batch's videos) and its slot there. A `ClipUse` is made
when a clip is looked at, and is equal to the one a plan made before: 64 bytes of a clip's plan
were its `ClipUse` (docs/performance.md#planning-and-scheduling-at-scale).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from typing import TYPE_CHECKING, NamedTuple, overload

import numpy as np

from sandfs.plan.cliptable import TableClips, clip_frames

if TYPE_CHECKING:
    from sandfs.plan.records import StreamClip
    from sandfs.plan.window import ViewKey

_new_use = tuple.__new__  # a ClipUse without its __new__'s call: made once a clip a look


class ClipUse(NamedTuple):
    """A clip in a slot of a batch: a tuple, so that one made on demand costs little."""

    view: ViewKey  # the batch
    slot: int  # position in the batch
    clip: StreamClip
    readers: tuple[tuple[str, int], ...]  # (task, position in its read order) per task


@dataclass(frozen=True, slots=True)
class ViewRow:
    """One batch as its videos' uses see it: its key, clips and readers (`view` and
    `readers` as a `ClipUse` names them: window-wide readers take either, `batches`)."""

    view: ViewKey
    clips: tuple[StreamClip, ...]
    readers: tuple[tuple[str, int], ...]


def _slot_column(slots: Sequence[int]) -> bytes | array:
    """Slots a byte each where they fit (a batch of up to 256 clips), else two."""
    fits = max(slots, default=0) < 256
    return bytes(list(slots)) if fits else array("H", slots)  # values, not an array's bytes


class ColumnUses(Sequence[ClipUse]):
    """A video's uses as columns, each use's batch and slot (`columns`), in the order they were
    planned; immutable, as the tuple they replace (the board's pending clips may be these). Two
    kinds: `Uses`, holding its own rows and slots, and `WindowUses`, a video's range of its
    window's `UseColumns`."""

    __slots__ = ()

    @property
    def columns(self) -> tuple[Sequence[ViewRow], bytes | array]:
        """Each use's batch and slot."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[ClipUse]:
        for row, slot in zip(*self.columns, strict=True):
            yield _new_use(ClipUse, (row.view, slot, row.clips[slot], row.readers))

    @overload
    def __getitem__(self, index: int) -> ClipUse: ...

    @overload
    def __getitem__(self, index: slice) -> Uses: ...

    def __getitem__(self, index):
        rows, slots = self.columns
        if isinstance(index, slice):
            return Uses(rows[index], slots[index])
        row, slot = rows[index], slots[index]
        return _new_use(ClipUse, (row.view, slot, row.clips[slot], row.readers))

    @staticmethod
    def of(uses: Sequence[ClipUse]) -> ColumnUses:
        """Loose uses as columns: a row a batch, holding only these uses' clips in their
        slots (the others None), so that no batch's whole clips are needed."""
        if isinstance(uses, ColumnUses):
            return uses
        clips: dict[ViewKey, list] = {}
        readers: dict[ViewKey, tuple] = {}
        for use in uses:
            found = clips.setdefault(use.view, [])
            readers.setdefault(use.view, use.readers)
            found.extend([None] * (use.slot + 1 - len(found)))
            found[use.slot] = use.clip
        rows = {view: ViewRow(view, tuple(c), readers[view]) for view, c in clips.items()}
        return Uses([rows[u.view] for u in uses], [u.slot for u in uses])

    def keep(self, wanted: Callable[[ViewKey], bool]) -> ColumnUses:
        """The uses whose batch is `wanted`, as columns still (this one if all are)."""
        mask = [wanted(row.view) for row in self.columns[0]]
        return self if all(mask) else self.select(mask)

    def select(self, mask: Sequence[bool]) -> Uses:
        """The uses where `mask` is true, as columns still."""
        if len(mask) != len(self):
            raise ValueError(f"{len(mask)} flags for {len(self)} uses")
        rows, slots = self.columns
        return Uses(tuple(compress(rows, mask)), list(compress(slots, mask)))

    def __add__(self, other: Sequence[ClipUse]) -> ColumnUses:
        if not isinstance(other, Sequence):
            return NotImplemented
        if not other:
            return self
        (rows, slots), (more, theirs) = self.columns, Uses.of(other).columns  # loose: rows
        return Uses(tuple(rows) + tuple(more), [*slots, *theirs])

    def __radd__(self, other: Sequence[ClipUse]) -> ColumnUses:
        if not isinstance(other, Sequence):
            return NotImplemented
        return Uses.of(other) + self if other else self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to a tuple, which hashes otherwise

    def __reduce__(self):
        """Sent to a worker process as the tuple it stands for: its rows hold their whole
        batches' clips, the video's own are enough there."""
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"Uses({list(self)!r})"


class Uses(ColumnUses):
    """Uses holding their own rows (a batch each) and slots."""

    __slots__ = ("_rows", "_slots")

    def __init__(self, rows: Sequence[ViewRow], slots: Sequence[int]) -> None:
        if len(rows) != len(slots):
            raise ValueError(f"{len(rows)} batches for {len(slots)} slots")
        self._rows = tuple(rows)
        self._slots = _slot_column(slots)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def columns(self) -> tuple[tuple[ViewRow, ...], bytes | array]:
        return self._rows, self._slots


def _array(code: str, values: np.ndarray) -> array:
    found = array(code)
    found.frombytes(np.ascontiguousarray(values, np.dtype(code)).tobytes())
    return found


class UseColumns:
    """A window's uses, all its videos', as columns grouped by video (`UseGroups`): each use's
    batch (an index into `rows`) and its slot there, and where each video's uses start
    (`starts`, one more than the videos). A video's `WindowUses` is its range of them: 5 or 6
    bytes a clip, not a tuple of rows and a column of slots a video."""

    __slots__ = ("batch", "rows", "slot", "starts")

    def __init__(self, rows: Sequence[ViewRow], batch: np.ndarray, slot: np.ndarray,
                 starts: np.ndarray) -> None:
        if len(batch) != len(slot) or starts[-1] != len(batch):
            raise ValueError(f"{len(batch)} batches, {len(slot)} slots, {starts[-1]} uses")
        self.rows = rows  # arrays, not numpy's: a video's group is read a few ints at a time
        self.batch = _array("i", batch)
        self.starts = _array("i" if len(batch) < 2**31 else "q", starts)  # a video's start
        self.slot = _array("B" if len(slot) == 0 or slot.max() < 256 else "H", slot)

    def __len__(self) -> int:
        """The videos."""
        return len(self.starts) - 1

    def group(self, group: int) -> WindowUses:
        """The uses of video `group`."""
        if not 0 <= group < len(self):
            raise ValueError(f"group {group} of a window's {len(self)}")
        return WindowUses(self, self.starts[group], self.starts[group + 1])


class WindowUses(ColumnUses):
    """A video's uses in a window: its range [start, end) of the window's `UseColumns`, its
    rows and slots made when they are read."""

    __slots__ = ("_columns", "_end", "_start")

    def __init__(self, columns: UseColumns, start: int, end: int) -> None:
        if not 0 <= start <= end <= len(columns.batch):
            raise ValueError(f"uses [{start}, {end}) of a window's {len(columns.batch)}")
        self._columns, self._start, self._end = columns, start, end

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def columns_and_range(self) -> tuple[UseColumns, int, int]:
        """The window's columns and this video's range of them."""
        return self._columns, self._start, self._end

    @property
    def columns(self) -> tuple[tuple[ViewRow, ...], array]:
        columns, start, end = self._columns, self._start, self._end
        rows = columns.rows
        return tuple(map(rows.__getitem__, columns.batch[start:end])), columns.slot[start:end]


def kept(uses: Sequence[ClipUse], wanted: Callable[[ViewKey], bool]) -> Sequence[ClipUse]:
    """The uses whose batch is `wanted`: as columns where they are, with no `ClipUse` made."""
    if isinstance(uses, ColumnUses):
        return uses.keep(wanted)
    return tuple(u for u in uses if wanted(u.view))


def selected(uses: Sequence[ClipUse], mask: Sequence[bool]) -> Sequence[ClipUse]:
    """The uses where `mask` is true (as columns where they are)."""
    if isinstance(uses, ColumnUses):
        return uses.select(mask)
    return tuple(u for u, m in zip(uses, mask, strict=True) if m)


def batches(uses: Sequence[ClipUse]) -> Sequence[ViewRow] | Sequence[ClipUse]:
    """Each use's batch, as its `view` and `readers`, with no `ClipUse` made for it."""
    return uses.columns[0] if isinstance(uses, ColumnUses) else uses


def frame_rows(uses: Sequence[ClipUse]) -> Iterator[tuple[ViewKey, int, tuple[int, ...],
                                                           tuple | None]]:
    """(batch, slot, frame indices, source) of each use, with no `ClipUse` or `StreamClip`
    made where its columns have them: what pruning and a video's frames read."""
    if isinstance(uses, ColumnUses):
        for row, slot in zip(*uses.columns, strict=True):
            clips = row.clips
            if type(clips) is TableClips:  # inline `clip_frames`: a clip a call, three passes
                frames, source = clips.table.frames_and_source(clips.start + slot)
            else:
                frames, source = clip_frames(clips, slot)
            yield row.view, slot, frames, source
    else:
        for use in uses:
            yield use.view, use.slot, use.clip.frame_indices, use.clip.source
