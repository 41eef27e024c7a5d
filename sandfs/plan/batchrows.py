"""A window's batches as rows, not a dict entry, tuple and `ViewPlan` each (SAND §5.4): a row
a batch, found from its `ViewKey` by arithmetic (its plan key's first epoch and iterations an
epoch), holding the task plan it is resolved with and its columns (`BatchColumns`: its key,
readers and, once resolved, clips). `WindowPlan.views`, `readers` and `view_plans` are
mappings over these rows (`RowMap`), with a small overlay for what tasks joining and leaving
change; a `ViewKey`, readers tuple and `ViewPlan` are made when one is looked up. A window
planned in parts has one table: each later part's new batches are rows added to it
(docs/performance.md#a-windows-batches-and-the-board).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sandfs.plan.batchcolumns import BatchColumns

if TYPE_CHECKING:
    from sandfs.plan.records import ViewPlan
    from sandfs.plan.task import TaskPlan
    from sandfs.plan.window import ViewKey

NONE = 0xFFFF  # no profile: a batch with no clips planned here (known, or failed)
_MISSING = object()
HELD_BESIDE = -2  # `RowMap.place`: a key held, not at its row's place


class BatchRows:
    """The batches of a window, a row each in planning order: those one `plan_window` call
    planned, then those of its later parts (`take`); a row is never changed once added: a
    batch deleted from a mapping (a task leaving) is that mapping's, its row stays as planned
    until the window drops (a copy taken before reads it so). A row is columns
    (`BatchColumns`: its key, readers and clips) and here its task plan and its plan's other
    fields; its `ViewKey`, readers and `ViewPlan` are made when read."""

    __slots__ = ("_index", "_owner", "_plan_of", "_plans", "_profile", "_profile_of",
                 "_profiles", "columns", "keys")

    def __init__(self) -> None:
        self.columns = BatchColumns()
        self._plans: list[TaskPlan] = []
        self._plan_of: dict[int, int] = {}  # id of a task plan -> its index
        self._owner = array("H")  # the plan each batch is resolved with
        # plan key -> (first epoch, iterations an epoch, each batch's row by its place)
        self._index: dict[object, tuple[int, int, _Places]] = {}
        self._profiles: list[tuple] = []  # distinct (task, shape, dtype, layout)
        self._profile_of: dict[tuple, int] = {}
        self._profile = array("H")  # per row, written last: its plan's other fields
        self.keys = _Keys(self)

    def __len__(self) -> int:
        return len(self._profile)

    def add(self, key: ViewKey, plan: TaskPlan, readers: tuple = ()) -> int:
        """A new batch, resolved with `plan`, read by `readers`; its row. Its columns are
        written before its index: a planning thread reading the mappings meanwhile finds
        no row, or a whole one."""
        first, per, rows = self._index_of(key, plan)
        owner = self._owner_of(plan)
        row = self.columns.append(key, per)
        if readers:
            self.columns.set_readers(row, readers)
        self._owner.append(owner)
        self._profile.append(NONE)
        rows.set((key.epoch - first) * per + key.iteration, row)
        return row

    def add_batches(self, key: ViewKey, plan: TaskPlan, iterations: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the batches of `key`'s plan key and epoch at these iterations (int64,
        distinct: each once), those not here added at once as `add` adds one, with no
        readers; and the iterations added. A window's planning, before its table is shared."""
        first, per, places = self._index_of(key, plan)
        at = (key.epoch - first) * per + iterations
        found = places.get_many(at)
        new = np.flatnonzero(found < 0)
        if len(new):
            start = self.columns.append_many(key, iterations[new], per)
            found[new] = np.arange(start, start + len(new))
            self._owner.extend([self._owner_of(plan)] * len(new))
            self._profile.extend([NONE] * len(new))
            places.set_many(at[new], found[new])
        return found, iterations[new]

    def _index_of(self, key: ViewKey, plan: TaskPlan) -> tuple[int, int, _Places]:
        """(first epoch, iterations an epoch, each batch's row by its place) of the key's
        plan key."""
        index = self._index.get(key.plan_key)
        if index is None:
            # every task of a plan key has its k epochs and batches an epoch (of the key)
            first = plan.window_epochs(plan.window_of(key.epoch)).start
            per = plan.iterations_per_epoch
            index = self._index[key.plan_key] = (first, per, _Places(plan.k_epochs * per))
        return index

    def _owner_of(self, plan: TaskPlan) -> int:
        owner = self._plan_of.get(id(plan))
        if owner is None:
            owner = self._plan_of[id(plan)] = len(self._plans)
            self._plans.append(plan)
        return owner

    def add_reader(self, row: int, task: str) -> None:
        self.columns.add_reader(row, task)

    def readers_of(self, row: int) -> tuple[tuple[str, int], ...]:
        return self.columns.readers_of(row)

    def key(self, row: int) -> ViewKey:
        return self.columns.key(row)

    def first_positions(self, rows: int) -> np.ndarray:
        """Each of the first `rows` rows' soonest reader position as planned (0: none), in
        numpy."""
        return self.columns.first_positions(rows)

    def owners(self, rows: int) -> tuple[list[TaskPlan], np.ndarray]:
        """The task plans, and the one each of the first `rows` rows is resolved with."""
        return list(self._plans), np.frombuffer(self._owner[:rows], np.uint16).astype(np.int64)

    def row_of(self, key: object) -> int:
        """The batch's row, or -1."""
        index = self._index.get(getattr(key, "plan_key", None))
        if index is None:
            return -1
        first, per, rows = index
        place = (key.epoch - first) * per + key.iteration  # type: ignore[attr-defined]
        if not 0 <= place < rows.size or not 0 <= key.iteration < per:  # type: ignore
            return -1
        return rows.get(place)

    def plan(self, row: int) -> TaskPlan:
        return self._plans[self._owner[row]]

    def place(self, row: int) -> tuple[TaskPlan, int, int]:
        """(task plan, epoch, iteration), as `WindowPlan.views` holds them."""
        return (self._plans[self._owner[row]], *self.columns.epoch_iteration(row))

    def resolved(self, row: int, view: ViewPlan) -> None:
        """The batch's clips and its plan's other fields (`view`'s)."""
        self.columns.set_clips(row, view.clips)
        profile = (view.task, view.shape, view.dtype, view.layout)
        number = self._profile_of.get(profile)
        if number is None:
            number = self._profile_of[profile] = len(self._profiles)
            self._profiles.append(profile)
        self._profile[row] = number

    def resolved_here(self, row: int) -> bool:
        return self._profile[row] != NONE

    def resolved_count(self, rows: int) -> int:
        """How many of the first `rows` rows were resolved here."""
        return int(np.count_nonzero(np.frombuffer(self._profile, np.uint16)[:rows] != NONE))

    def take(self, other: BatchRows, keys: list[ViewKey], readers: Mapping) -> None:
        """Rows of `other` (a later part of the window) for these keys, none of which has a
        row here; `readers`: theirs, as the part's mapping has them."""
        for key in keys:
            row = other.row_of(key)
            mine = self.add(key, other.plan(row), readers[key])
            view = other.view_plan(row)
            if view is not None:
                self.resolved(mine, view)

    def view_plan(self, row: int) -> ViewPlan | None:
        """The batch's plan, made now from its row; None when not resolved here."""
        from sandfs.plan.records import ViewPlan
        number = self._profile[row]
        if number == NONE:
            return None
        task, shape, dtype, layout = self._profiles[number]
        return ViewPlan(task, *self.columns.epoch_iteration(row), self.columns.clips(row),
                        shape, dtype, layout)


class _Places:
    """Each batch's row by its place among a plan key's k epochs ((epoch - first) * per +
    iteration; -1: none): a dict while the table holds few of the places, an array of them all
    once it holds a 32nd. A window's part holds a few hundred of 156,250 places at 250,000
    videos, and an array of every place was 625 KB a part: 320 MB over window 0's 512 parts
    (docs/performance.md#pruning-is-the-daemon-s-peak)."""

    __slots__ = ("_dense", "_sparse", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._sparse: dict[int, int] = {}
        self._dense: array | None = None

    def get(self, place: int) -> int:
        dense = self._dense
        if dense is not None:
            return dense[place]
        return self._sparse.get(place, -1)

    def get_many(self, places: np.ndarray) -> np.ndarray:
        """`get` of each, int64."""
        if self._dense is not None:
            return np.frombuffer(self._dense, np.int32)[places].astype(np.int64)
        get = self._sparse.get
        return np.fromiter((get(place, -1) for place in places.tolist()), np.int64, len(places))

    def set_many(self, places: np.ndarray, rows: np.ndarray) -> None:
        """`set` of each: as an array once they are more than a 32nd of the places."""
        if self._dense is None and (len(self._sparse) + len(places)) * 32 > self.size:
            dense = array("i", [-1]) * self.size
            for at, found in self._sparse.items():
                dense[at] = found
            self._dense = dense
        if self._dense is None:
            self._sparse.update(zip(places.tolist(), rows.tolist(), strict=True))
            return
        dense = np.frombuffer(self._dense, np.int32)  # never resized: a view writes it
        dense[places] = rows

    def set(self, place: int, row: int) -> None:
        """Written by the planning thread that adds rows, read by others meanwhile: the dict
        stays as it is once the array reads for it."""
        if self._dense is not None:
            self._dense[place] = row
            return
        self._sparse[place] = row
        if len(self._sparse) * 32 > self.size:
            dense = array("i", [-1]) * self.size
            for at, found in self._sparse.items():
                dense[at] = found
            self._dense = dense


class _Keys(Sequence):
    """Each row's `ViewKey`, made when read."""

    __slots__ = ("_table",)

    def __init__(self, table: BatchRows) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self._table.key(i) for i in range(len(self))[row]]
        return self._table.key(_row_index(row, len(self)))


def _row_index(row, rows: int) -> int:
    row = int(row)  # numpy's ints too
    if row < 0:
        row += rows
    if not 0 <= row < rows:
        raise IndexError(f"row {row} of {rows}")
    return row


class RowMap(MutableMapping):
    """A mapping over the rows of a window's `BatchRows`, read by arithmetic; what is set or
    deleted afterwards is kept beside them, with a dict's order: a row's key where its row
    is, keys set anew after the rows. A copy (`copy`) reads the mapping as it was when made,
    with an overlay of its own: rows added since (a window's later parts, `take`) are not its,
    and a key deleted since (a task leaving) still reads as planned, its row being unchanged
    (pruning decides the same whether a task left while it ran or not)."""

    __slots__ = ("_deleted", "_extra", "_limit", "_override", "table")

    def __init__(self, table: BatchRows, limit: int | None = None) -> None:
        self.table = table
        self._limit = limit  # rows past it are not this mapping's (None: every row)
        self._override: dict = {}  # rows' keys set since, at their row's place
        self._extra: dict = {}  # keys not at a row's place
        self._deleted: set = set()  # rows' keys deleted since

    def _value(self, row: int):
        raise NotImplementedError

    def _holds(self, row: int) -> bool:
        return True

    def _find(self, key: object) -> int:
        """The key's row, overlay aside."""
        row = self.table.row_of(key)
        if row < 0 or (self._limit is not None and row >= self._limit):
            return -1
        return row if self._holds(row) else -1

    # the overlay is looked at only when it holds anything: a key's hash is Python code
    def get(self, key, default=None):
        """As `__getitem__`, without an exception for a key not here (a part's rest asks
        its window's `view_plans` for each of its batches, most not resolved yet)."""
        # one call a dict: a task leaving (the event loop) may delete the key meanwhile
        value = self._extra.get(key, _MISSING) if self._extra else _MISSING
        if value is _MISSING and self._override:
            value = self._override.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if not (self._deleted and key in self._deleted):
            row = self._find(key)
            if row >= 0:
                return self._value(row)
        return default

    def __getitem__(self, key):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def place(self, key: object) -> int:
        """Where the key is held: its row, HELD_BESIDE when set beside the rows, -1 when not
        held (its row looked up once, for a caller that keeps bytes by row; the board asks
        it of every batch a joining task's clip is of)."""
        if self._extra and key in self._extra:
            return HELD_BESIDE
        if self._deleted and key in self._deleted:
            return -1
        row = self.table.row_of(key)
        if row < 0 or (self._limit is not None and row >= self._limit):
            return -1
        return row if self._holds(row) else -1

    def __contains__(self, key: object) -> bool:
        if (self._extra and key in self._extra) or (self._override and key in self._override):
            return True
        return not (self._deleted and key in self._deleted) and self._find(key) >= 0

    def __setitem__(self, key, value) -> None:
        if key not in self._extra and key not in self._deleted and self._find(key) >= 0:
            self._override[key] = value
        else:
            self._extra[key] = value

    def __delitem__(self, key) -> None:
        if key in self._extra:
            del self._extra[key]
        elif key in self._override or (key not in self._deleted and self._find(key) >= 0):
            self._override.pop(key, None)
            self._deleted.add(key)
        else:
            raise KeyError(key)

    def _rows(self) -> Iterator[tuple[object, int]]:
        """(key, row) of the keys held at a row's place, in order."""
        hidden = self._deleted | self._extra.keys()
        table = self.table
        for row in range(len(table) if self._limit is None else self._limit):
            key = table.key(row)
            if self._holds(row) and not (hidden and key in hidden):
                yield key, row

    def keyed_rows(self) -> Iterator[tuple[object, int]]:
        """(key, row) of each key in order; -1 for a key held beside the rows."""
        yield from self._rows()
        for key in list(self._extra):
            yield key, -1

    def changed(self) -> set:
        """The keys whose values are not their rows' (set or deleted since)."""
        return set(self._override) | set(self._extra) | set(self._deleted)

    def __iter__(self) -> Iterator:
        for key, _ in self._rows():
            yield key
        yield from self._extra

    def items(self) -> Iterator[tuple]:  # type: ignore[override]
        """Each key and value, with no lookup of the key made again."""
        override = self._override
        for key, row in self._rows():
            yield key, override[key] if override and key in override else self._value(row)
        yield from self._extra.items()

    def values(self) -> Iterator:  # type: ignore[override]
        return (value for _, value in self.items())

    def __len__(self) -> int:
        """Counted from the overlay, not a walk (a status asks it of a window's batches)."""
        rows = len(self.table) if self._limit is None else self._limit
        return self._held_rows(rows) - len(self._deleted) + len(self._extra)

    def _held_rows(self, rows: int) -> int:
        """How many of the first `rows` rows this mapping holds."""
        return rows

    def deleted(self) -> frozenset | set:
        """The rows' keys deleted since the rows were made (some may be set anew since)."""
        return self._deleted

    def plan_keys(self) -> set:
        """The plan keys of its batches' keys, or more (its table's, rows deleted since):
        a few, with no key made a row."""
        return {*self.table.columns.plan_keys(), *(key.plan_key for key in self._extra)}

    def is_over(self, table: BatchRows) -> bool:
        """Does this mapping read `table`'s rows, all of them (not a copy's)?"""
        return self.table is table and self._limit is None

    def copy(self) -> RowMap:
        """A copy sharing the rows there are now (never changed), with copies of the
        overlay."""
        copied = type(self)(self.table, len(self.table) if self._limit is None else self._limit)
        copied._override, copied._extra = dict(self._override), dict(self._extra)
        copied._deleted = set(self._deleted)
        return copied

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} batches)"


def plan_keys_of(keys: Iterable) -> set:
    """The plan keys of a window's batches (a mapping over rows: from its table)."""
    if isinstance(keys, RowMap):
        return keys.plan_keys()
    return {key.plan_key for key in keys}


class ViewsMap(RowMap):
    """key -> (task plan, epoch, iteration), as `WindowPlan.views` holds them."""

    __slots__ = ()

    def _value(self, row: int):
        return self.table.place(row)


class ReadersMap(RowMap):
    """key -> its (task, position) readers."""

    __slots__ = ()

    def _value(self, row: int):
        return self.table.readers_of(row)


class ViewPlansMap(RowMap):
    """key -> its `ViewPlan`, made from its row: only the batches resolved here."""

    __slots__ = ()

    def _holds(self, row: int) -> bool:
        return self.table.resolved_here(row)

    def _held_rows(self, rows: int) -> int:
        return self.table.resolved_count(rows)

    def _value(self, row: int):
        return self.table.view_plan(row)
