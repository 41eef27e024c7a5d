"""What a window's batch is as columns, without its task plan: its key (its plan key's number,
epoch and iteration), its readers (a bit a task of its plan key) and its clips (a range of one
of the window's clip tables). A batch's `ViewKey`, readers and clips are made when read, and
its `ViewRow` is a `TableRow` that reads them from here: a batch held a `ViewKey`, a
`TableClips`, a readers tuple and their ints, ~45 bytes a clip of the `small` task
(docs/performance.md#a-windows-batches-and-the-board). The uses of a task that left keep
these columns, not its plan (`BatchRows` holds the plans).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sandfs.plan.cliptable import TableClips, clip_frames, table_clips
from sandfs.plan.uses import ViewRow

if TYPE_CHECKING:
    from sandfs.plan.cliptable import ClipTable
    from sandfs.plan.records import StreamClip
    from sandfs.plan.window import ViewKey

_new_tuple = tuple.__new__  # a `ViewKey` without its __new__'s call: made whenever one is read
_new_object, _set = object.__new__, object.__setattr__  # a frozen `TableRow`'s fields
MASK_BITS = 64  # tasks of a plan key a row's readers say as bits; more: a tuple


class BatchColumns:
    """A row a batch, appended (`append`) and never changed but for its readers and clips,
    set as it is planned and resolved, and kept as long as the window: a task leaving deletes
    the batch from the window's mappings only, so that a snapshot taken before (pruning, in a
    thread) and the uses planned before still read it as planned. A task reads a batch at its
    epoch times its plan key's batches an epoch plus its iteration, as a window's planning
    makes readers; a row whose readers the bits cannot say (a later part's, a task past
    MASK_BITS) keeps them as a tuple."""

    __slots__ = ("_bits", "_clips", "_count", "_epoch", "_iteration", "_key_type", "_keyed",
                 "_loose", "_mask", "_named", "_names", "_odd", "_per", "_plan_key",
                 "_plan_keys", "_start", "_table_of", "_tables")

    def __init__(self) -> None:
        self._key_type: type = tuple  # a row's key's (`append`): a `ViewKey`
        self._plan_keys: list[object] = []  # distinct plan keys, by number
        self._keyed: dict[object, int] = {}  # plan key -> its number
        self._per = array("i")  # a plan key's batches an epoch
        self._bits: list[dict[str, int]] = []  # a plan key's readers: task -> its bit
        # a plan key's readers by bit, append-only: read (never iterated as a dict) by threads
        # while the loop adds a task joining
        self._names: list[list[str]] = []
        self._named: dict[tuple[int, int], tuple[str, ...]] = {}  # (plan key, bits) -> tasks
        self._plan_key, self._epoch, self._iteration = array("H"), array("i"), array("i")
        self._mask = array("Q")  # the row's readers: bits of its plan key's tasks
        self._odd: dict[int, tuple] = {}  # rows whose readers the bits cannot say
        self._tables: list[ClipTable] = []  # the clip tables the rows' clips are ranges of
        self._table_of: dict[int, int] = {}  # id of a table -> its index
        self._clips = array("i")  # the row's table, -1: none (not resolved, or `_loose`)
        self._start, self._count = array("i"), array("H")
        self._loose: dict[int, Sequence[StreamClip]] = {}  # clips not in a table (a tuple)

    def append(self, key: ViewKey, per: int) -> int:
        """A batch's row (`per`: its plan key's batches an epoch), with no readers or clips."""
        if not isinstance(key, tuple):
            raise TypeError(f"a batch's key is a ViewKey, not {type(key).__name__}")
        self._key_type = type(key)  # plan.window imports this module
        number = self._keyed.get(key.plan_key)
        if number is None:
            number = self._keyed[key.plan_key] = len(self._plan_keys)
            self._plan_keys.append(key.plan_key)
            self._per.append(per)
            self._bits.append({})
            self._names.append([])
        row = len(self._epoch)
        self._plan_key.append(number)
        self._mask.append(0)
        self._clips.append(-1)
        self._start.append(0)
        self._count.append(0)
        self._iteration.append(key.iteration)
        self._epoch.append(key.epoch)  # last: `__len__`
        return row

    def append_many(self, key: ViewKey, iterations: np.ndarray, per: int) -> int:
        """Rows for the batches of `key`'s plan key and epoch at these iterations, as `append`
        makes them; the first's number."""
        row = self.append(key._replace(iteration=int(iterations[0])), per)
        more = len(iterations) - 1
        if more:
            number = self._plan_key[row]
            for column, value in ((self._plan_key, number), (self._mask, 0),
                                  (self._clips, -1), (self._start, 0), (self._count, 0)):
                column.extend(array(column.typecode, [value]) * more)
            self._iteration.frombytes(iterations[1:].astype(np.int32).tobytes())
            self._epoch.extend(array("i", [key.epoch]) * more)  # last: `__len__`
        return row

    def __len__(self) -> int:
        return len(self._epoch)

    def key(self, row: int) -> ViewKey:
        return _new_tuple(self._key_type, (self._plan_keys[self._plan_key[row]],
                                           self._epoch[row], self._iteration[row]))

    def plan_keys(self) -> tuple[object, ...]:
        """The distinct plan keys of the rows (a window's: a few)."""
        return tuple(self._plan_keys)

    def epoch_iteration(self, row: int) -> tuple[int, int]:
        return self._epoch[row], self._iteration[row]

    # -- readers ----------------------------------------------------------------------------

    def add_reader(self, row: int, task: str) -> None:
        """One more reader of the batch, at its place (a window's planning, a task at a
        time)."""
        bit = self._bit(self._plan_key[row], task)
        if bit < MASK_BITS and row not in self._odd:
            self._mask[row] |= 1 << bit
        else:
            self._odd[row] = (*self.readers_of(row), self._reader(row, task))

    def add_readers(self, rows: np.ndarray, task: str) -> None:
        """`add_reader` of each of these rows of one plan key, at once where their readers
        are bits. A window's planning only, before its table is shared: the rows' masks
        are copied, changed and written back."""
        if not len(rows):
            return
        bit = self._bit(self._plan_key[int(rows[0])], task)
        if bit >= MASK_BITS or self._odd:
            for row in rows.tolist():
                self.add_reader(row, task)
            return
        low, high = int(rows.min()), int(rows.max()) + 1
        mask = np.frombuffer(self._mask[low:high], np.uint64).copy()
        mask[rows - low] |= np.uint64(1 << bit)
        self._mask[low:high] = array("Q", mask.tobytes())

    def _bit(self, number: int, task: str) -> int:
        """The task's bit among its plan key's readers (its name there before any row's mask
        has it)."""
        bits = self._bits[number]
        bit = bits.get(task)
        if bit is None:
            names = self._names[number]
            bit = bits[task] = len(names)
            names.append(task)
        return bit

    def set_readers(self, row: int, readers: tuple) -> None:
        """The batch's readers as bits where they say the same, else as they are."""
        self._mask[row] = 0
        self._odd.pop(row, None)
        for task, _ in readers:
            self.add_reader(row, task)
        if self.readers_of(row) != tuple(readers):
            self._odd[row] = tuple(readers)

    def _reader(self, row: int, task: str) -> tuple[str, int]:
        return task, self._epoch[row] * self._per[self._plan_key[row]] + self._iteration[row]

    def readers_of(self, row: int) -> tuple[tuple[str, int], ...]:
        """The batch's readers as planned (a task joining or leaving since: the mappings')."""
        odd = self._odd.get(row) if self._odd else None
        if odd is not None:
            return odd
        number, mask = self._plan_key[row], self._mask[row]
        names = self._named.get((number, mask))
        if names is None:
            by_bit = self._names[number]
            names = self._named[number, mask] = tuple(
                [by_bit[bit] for bit in range(mask.bit_length()) if mask >> bit & 1])
        position = self._epoch[row] * self._per[number] + self._iteration[row]
        if len(names) == 1:
            return ((names[0], position),)
        return tuple([(task, position) for task in names])

    def first_positions(self, rows: int) -> np.ndarray:
        """The soonest position each of the first `rows` rows is read at (0: no reader), in
        numpy: the readers its bits say all read it at one place. Copies of the columns are
        read (a planning thread may append meanwhile)."""
        number = _ints(self._plan_key, rows)
        position = (_ints(self._epoch, rows) * _ints(self._per, len(self._per))[number]
                    + _ints(self._iteration, rows))
        first = np.where(_ints(self._mask, rows) != 0, position, 0)
        for row, readers in list(self._odd.items()):
            if row < rows:
                first[row] = min((p for _, p in readers), default=0)
        return first

    # -- clips ------------------------------------------------------------------------------

    def set_clips(self, row: int, clips: Sequence[StreamClip]) -> None:
        if type(clips) is TableClips:
            table = self._table_of.get(id(clips.table))
            if table is None:
                table = self._table_of[id(clips.table)] = len(self._tables)
                self._tables.append(clips.table)
            self._start[row], self._count[row] = clips.start, clips.count
            self._clips[row] = table
        else:
            self._loose[row] = clips

    def clips(self, row: int) -> Sequence[StreamClip] | None:
        """The batch's clips as resolved (None: not resolved with these columns)."""
        table = self._clips[row]
        if table < 0:
            return self._loose.get(row) if self._loose else None
        return table_clips(self._tables[table], self._start[row], self._count[row])

    def table_spans(self, rows: Sequence[int]
                    ) -> tuple[ClipTable, np.ndarray, np.ndarray] | None:
        """The one clip table these rows' clips are ranges of, each row's first clip there
        and its count, in numpy; None when they are not all of one table."""
        if not len(rows):
            return None
        low = min(rows)
        at = np.asarray(rows, np.int64) - low
        high = int(at.max()) + low + 1  # the columns' slices are copies: a thread may append
        tables = np.frombuffer(self._clips[low:high], np.int32)[at]
        if tables[0] < 0 or (tables != tables[0]).any():
            return None
        return (self._tables[tables[0]], np.frombuffer(self._start[low:high], np.int32)[at],
                np.frombuffer(self._count[low:high], np.uint16)[at])

    def clip_rows(self, rows: int) -> tuple[list[ClipTable], np.ndarray, np.ndarray]:
        """The clip tables, and each of the first `rows` rows' table (-1: none, its clips
        `clips`') and first clip there, in numpy (copies: a planning thread may append)."""
        return list(self._tables), _ints(self._clips, rows), _ints(self._start, rows)

    def frames_and_source(self, row: int, slot: int) -> tuple[tuple[int, ...], tuple | None]:
        """The frame indices and source of the clip in `slot` of the batch."""
        table = self._clips[row]
        if table < 0:
            return clip_frames(self.clips(row), slot)  # type: ignore[arg-type]
        return self._tables[table].frames_and_source(self._start[row] + slot)

    def view_row(self, row: int) -> TableRow:
        """The batch as its videos' uses see it, made when read (a use holds its row's
        number, `uses.TableRows`)."""
        made = _new_object(TableRow)
        _set(made, "_columns", self)
        _set(made, "_row", row)
        return made


class TableRow:
    """A batch's `ViewRow` as its row of a window's `BatchColumns`: its key, clips and readers
    made when read, so that a batch holds no `ViewKey`, `TableClips` or readers tuple of its
    own. Read as a `ViewRow` (`view`, `clips`, `readers`), not one: a subclass held its three
    slots unused, 56 bytes a batch, not 32. Made when read, not held: two are equal when they
    read the same row of the same columns. Frozen."""

    __slots__ = ("_columns", "_row")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a TableRow is frozen: {name}")

    # `view` and `clips` are read a use at a time by a window's walks: `key` and `clips`
    # inlined
    @property
    def view(self) -> ViewKey:
        columns, row = self._columns, self._row
        return _new_tuple(columns._key_type, (columns._plan_keys[columns._plan_key[row]],
                                              columns._epoch[row], columns._iteration[row]))

    @property
    def clips(self) -> Sequence[StreamClip]:
        columns, row = self._columns, self._row
        table = columns._clips[row]
        if table < 0:
            return columns.clips(row)
        return table_clips(columns._tables[table], columns._start[row], columns._count[row])

    @property
    def place(self) -> tuple[BatchColumns, int]:
        """The columns and the row it reads."""
        return self._columns, self._row

    @property
    def readers(self) -> tuple[tuple[str, int], ...]:
        return self._columns.readers_of(self._row)

    def __eq__(self, other: object) -> bool:
        if type(other) is not TableRow:
            return NotImplemented
        return self._columns is other._columns and self._row == other._row

    def __hash__(self) -> int:
        return hash((id(self._columns), self._row))

    def __reduce__(self):
        """Sent elsewhere (or copied) as the `ViewRow` it stands for, not with its columns."""
        return ViewRow, (self.view, self.clips, self.readers)


def _ints(column: array, rows: int) -> np.ndarray:
    """A copy of a column's first `rows` values as int64 (its `array` may grow meanwhile)."""
    return np.frombuffer(column[:rows], np.dtype(column.typecode)).astype(np.int64)
