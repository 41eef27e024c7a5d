"""A video's clips in a window as two columns, not an object each: the batch each clip is in (a
`ViewRow`; in a window, its row's number in the window's batch columns, `TableRows`, the row
made when read) and its slot there. A `ClipUse` is made when a clip is looked at, and is equal
to the one a plan made before: 64 bytes of a clip's plan were its `ClipUse`
(docs/performance.md#planning-and-scheduling-at-scale); a row held a batch, 76 bytes, and a
window planned in parts held one a part its batch is in
(docs/performance.md#a-windows-batches-and-the-board).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from typing import TYPE_CHECKING, NamedTuple, overload

import numpy as np

from sandfs.plan.cliptable import TableClips, clip_frames

if TYPE_CHECKING:
    from sandfs.plan.batchcolumns import BatchColumns
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


class TableRows(Sequence[ViewRow]):
    """Batches as their rows' numbers in a window's batch columns (`BatchColumns`), 4 bytes a
    use: a row (`TableRow`) or key made when read, none held. A video's uses joined from
    parts planned apart (a task joining) read several tables, a run of its uses each."""

    # `_tables`: the table, or each run's table and where it ends (table, end, table, ...)
    __slots__ = ("_tables", "numbers")

    def __init__(self, table: BatchColumns, numbers: array | range) -> None:
        self._tables: BatchColumns | tuple = table
        self.numbers = numbers

    @staticmethod
    def of_runs(runs: Iterable[tuple[BatchColumns, Iterable[int]]]) -> TableRows:
        """Rows of these runs (table, numbers), a run joined to the one before where both
        read the same table."""
        tables: list = []
        numbers: list[int] = []  # an array's size made once: one grown holds more
        for table, theirs in runs:
            numbers.extend(theirs)
            if tables and tables[-2] is table:
                tables[-1] = len(numbers)
            elif len(numbers) > (tables[-1] if tables else 0):
                tables += [table, len(numbers)]
        made = TableRows.__new__(TableRows)
        made._tables = tables[0] if len(tables) == 2 else tuple(tables)
        made.numbers = array("i", numbers)
        return made

    def runs(self) -> Iterator[tuple[BatchColumns, array | range]]:
        """Each run's table and its numbers."""
        tables, numbers = self._tables, self.numbers
        if type(tables) is not tuple:
            yield tables, numbers
            return
        for at in range(0, len(tables), 2):
            yield tables[at], numbers[tables[at - 1] if at else 0:tables[at + 1]]

    def _table_at(self, index: int) -> BatchColumns:
        tables = self._tables
        if type(tables) is not tuple:
            return tables
        index += len(self.numbers) if index < 0 else 0
        return next(tables[at] for at in range(0, len(tables), 2) if index < tables[at + 1])

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self) -> Iterator[ViewRow]:
        return chain.from_iterable(map(table.view_row, numbers) for table, numbers in self.runs())

    @overload
    def __getitem__(self, index: int) -> ViewRow: ...

    @overload
    def __getitem__(self, index: slice) -> TableRows: ...

    def __getitem__(self, index):
        if not isinstance(index, slice):
            number = self.numbers[index]  # an IndexError past the uses
            return self._table_at(index).view_row(number)
        if type(self._tables) is not tuple:
            return TableRows(self._tables, self.numbers[index])
        return TableRows.of_runs((self._table_at(at), (self.numbers[at],))
                                 for at in range(len(self))[index])

    def views(self) -> Iterator[ViewKey]:
        """Each row's batch key, with no row made."""
        return chain.from_iterable(map(table.key, numbers) for table, numbers in self.runs())

    def key(self, index: int) -> ViewKey:
        """Row `index`'s batch key, with no row made."""
        number = self.numbers[index]
        return self._table_at(index).key(number)

    def select(self, mask: Sequence[bool]) -> TableRows:
        if type(self._tables) is not tuple:
            return TableRows(self._tables, array("i", compress(self.numbers, mask)))
        return TableRows.of_runs(zip(self._tables[::2], _cut(compress(self.numbers, mask), [
            sum(mask[:end]) for end in self._tables[1::2]]), strict=True))

    def __add__(self, other: Sequence[ViewRow]) -> Sequence[ViewRow]:
        if type(other) is TableRows:
            return TableRows.of_runs(chain(self.runs(), other.runs()))
        return (*self, *other)  # loose rows (`ColumnUses.of`): a ClipUse each held already


def _cut(values: Iterable[int], ends: list[int]) -> list[array]:
    """`values` cut at these ends."""
    found = array("i", values)
    return [found[start:end] for start, end in zip([0, *ends], ends, strict=False)]


def _runs(rows: TableRows, slots: Sequence[int]
          ) -> Iterator[tuple[BatchColumns, array | range, Sequence[int]]]:
    """Each run of the rows with its uses' slots."""
    if type(rows._tables) is not tuple:  # one run: its slots all, not a copy
        yield rows._tables, rows.numbers, slots
        return
    at = 0
    for table, numbers in rows.runs():
        yield table, numbers, slots[at:at + len(numbers)]
        at += len(numbers)


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
        rows, slots = self.columns
        if type(rows) is TableRows:  # read from the tables by number: no row made
            for table, numbers, theirs in _runs(rows, slots):
                key, clips, readers = table.key, table.clips, table.readers_of
                for number, slot in zip(numbers, theirs, strict=True):
                    yield _new_use(ClipUse, (key(number), slot, clips(number)[slot],
                                             readers(number)))
            return
        for row, slot in zip(rows, slots, strict=True):
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
        mask = list(map(wanted, row_views(self.columns[0])))
        return self if all(mask) else self.select(mask)

    def select(self, mask: Sequence[bool]) -> Uses:
        """The uses where `mask` is true, as columns still."""
        if len(mask) != len(self):
            raise ValueError(f"{len(mask)} flags for {len(self)} uses")
        rows, slots = self.columns
        kept = rows.select(mask) if type(rows) is TableRows else tuple(compress(rows, mask))
        return Uses(kept, list(compress(slots, mask)))

    def __add__(self, other: Sequence[ClipUse]) -> ColumnUses:
        if not isinstance(other, Sequence):
            return NotImplemented
        if not other:
            return self
        (rows, slots), (more, theirs) = self.columns, Uses.of(other).columns  # loose: rows
        joined = rows + more if type(rows) is TableRows else (*rows, *more)
        return Uses(joined, [*slots, *theirs])

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
    """Uses holding their own rows (a batch each, or their numbers: `TableRows`) and
    slots."""

    __slots__ = ("_rows", "_slots")

    def __init__(self, rows: Sequence[ViewRow], slots: Sequence[int]) -> None:
        if len(rows) != len(slots):
            raise ValueError(f"{len(rows)} batches for {len(slots)} slots")
        self._rows = rows if type(rows) is TableRows else tuple(rows)
        self._slots = _slot_column(slots)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def columns(self) -> tuple[Sequence[ViewRow], bytes | array]:
        return self._rows, self._slots


def _array(code: str, values: np.ndarray) -> array:
    found = array(code)
    found.frombytes(np.ascontiguousarray(values, np.dtype(code)).tobytes())
    return found


class UseColumns:
    """A window's uses, all its videos', as columns grouped by video (`UseGroups`): each use's
    batch (its row's number in the window's batch columns, `table`) and its slot there, and
    where each video's uses start (`starts`, one more than the videos). A video's `WindowUses`
    is its range of them: 5 or 6 bytes a clip, and no object a batch (`rows`: made when
    read)."""

    __slots__ = ("batch", "held", "slot", "starts", "table")

    def __init__(self, table: BatchColumns, batch: np.ndarray, slot: np.ndarray,
                 starts: np.ndarray) -> None:
        if len(batch) != len(slot) or starts[-1] != len(batch):
            raise ValueError(f"{len(batch)} batches, {len(slot)} slots, {starts[-1]} uses")
        held = len(table)  # rows added later (a window's later parts) are not these uses'
        if len(batch) and not 0 <= int(batch.min()) <= int(batch.max()) < held:
            raise ValueError(f"batch rows {int(batch.min())}..{int(batch.max())} of {held}")
        self.table, self.held = table, held
        self.batch = _array("i", batch)  # arrays, not numpy's: a group is read a few at a time
        self.starts = _array("i" if len(batch) < 2**31 else "q", starts)  # a video's start
        self.slot = _array("B" if len(slot) == 0 or slot.max() < 256 else "H", slot)

    @property
    def rows(self) -> TableRows:
        """Batch b's row is `rows[b]`, made when read."""
        return TableRows(self.table, range(self.held))

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
    def columns(self) -> tuple[TableRows, array]:
        columns, start, end = self._columns, self._start, self._end
        return TableRows(columns.table, columns.batch[start:end]), columns.slot[start:end]


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
    if not isinstance(uses, ColumnUses):
        for use in uses:
            yield use.view, use.slot, use.clip.frame_indices, use.clip.source
        return
    rows, slots = uses.columns
    if type(rows) is TableRows:  # read from the tables by number: no row made
        for table, numbers, theirs in _runs(rows, slots):
            for number, slot in zip(numbers, theirs, strict=True):
                yield (table.key(number), slot, *table.frames_and_source(number, slot))
        return
    for row, slot in zip(rows, slots, strict=True):
        clips = row.clips
        if type(clips) is TableClips:  # inline `clip_frames`: a clip a call, three passes
            frames, source = clips.table.frames_and_source(clips.start + slot)
        else:
            frames, source = clip_frames(clips, slot)
        yield row.view, slot, frames, source


def row_views(rows: Sequence[ViewRow] | Sequence[ClipUse]) -> Iterator[ViewKey]:
    """Each row's (or use's) batch key, with no row made for rows read by number."""
    return rows.views() if type(rows) is TableRows else (row.view for row in rows)


def distinct_rows(columns: Sequence[Sequence[ViewRow]]) -> tuple[list[ViewRow], array]:
    """The distinct batches of uses' rows (a sequence of rows a video), a row each, and each
    use's index among them (int32): a row of a table by (table, number), whether read by
    number (`TableRows`, no row made a use) or held (`TableRow`); another by identity
    (`cliptable.distinct`)."""
    tables: dict[int, int] = {}

    def base(table: BatchColumns) -> int:  # past any address: a (table, number) is not an id
        return tables.setdefault(id(table), len(tables)) << 32 | 1 << 62

    def held(row: ViewRow) -> int:
        place = getattr(row, "place", None)  # a `TableRow`'s (columns, row)
        return id(row) if place is None else base(place[0]) + place[1]

    ids = []
    for rows in columns:
        if type(rows) is TableRows:
            ids.extend(np.asarray(numbers, np.int64) + base(table)
                       for table, numbers in rows.runs())
        else:
            ids.append(np.fromiter(map(held, rows), np.int64, len(rows)))
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    found = array("i")
    found.frombytes(inverse.astype(np.int32).tobytes())
    ends = np.cumsum([len(rows) for rows in columns])
    which = np.searchsorted(ends, first, "right").tolist()
    return [columns[w][i - (int(ends[w - 1]) if w else 0)]
            for w, i in zip(which, first.tolist(), strict=True)], found
