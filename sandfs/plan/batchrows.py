"""A window's batches as rows, not a dict entry, tuple and `ViewPlan` each (SAND §5.4): a row
a batch, found from its `ViewKey` by arithmetic (its plan key's first epoch and iterations an
epoch), holding the task plan it is resolved with, its readers and, once resolved, its clips
(a `ViewRow`, shared by its videos' uses). `WindowPlan.views`, `readers` and `view_plans` are
mappings over these rows (`RowMap`), with a small overlay for what tasks joining and leaving
change; a `ViewPlan` is made when one is looked up
(docs/performance.md#a-window-s-batches-and-the-board).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandfs.plan.records import ViewPlan
    from sandfs.plan.task import TaskPlan
    from sandfs.plan.uses import ViewRow
    from sandfs.plan.window import ViewKey

NONE = 0xFFFF  # no profile: a batch with no clips planned here (known, or failed)


class BatchRows:
    """The batches one `plan_window` call planned, a row each in planning order; rows are only
    added while it plans, never changed after."""

    __slots__ = ("_index", "_owner", "_plan_of", "_plans", "_profile", "_profile_of",
                 "_profiles", "keys", "readers", "rows")

    def __init__(self) -> None:
        self.keys: list[ViewKey] = []
        self.readers: list[tuple] = []  # (task, position) pairs, as a `ClipUse` has them
        self.rows: list[ViewRow | None] = []  # the batch's clips once resolved here
        self._plans: list[TaskPlan] = []
        self._plan_of: dict[int, int] = {}  # id of a task plan -> its index
        self._owner = array("H")  # the plan each batch is resolved with
        # plan key -> (first epoch, iterations an epoch, row of each batch or -1)
        self._index: dict[object, tuple[int, int, array]] = {}
        self._profiles: list[tuple] = []  # distinct (task, shape, dtype, layout)
        self._profile_of: dict[tuple, int] = {}
        self._profile = array("H")

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: ViewKey, plan: TaskPlan) -> int:
        """A new batch, resolved with `plan`; its row."""
        index = self._index.get(key.plan_key)
        if index is None:
            # every task of a plan key has its k epochs and batches an epoch (of the key)
            first = plan.window_epochs(plan.window_of(key.epoch)).start
            per = plan.iterations_per_epoch
            index = self._index[key.plan_key] = (first, per,
                                                 array("i", [-1]) * (plan.k_epochs * per))
        first, per, rows = index
        row = len(self.keys)
        rows[(key.epoch - first) * per + key.iteration] = row
        number = self._plan_of.get(id(plan))
        if number is None:
            number = self._plan_of[id(plan)] = len(self._plans)
            self._plans.append(plan)
        self._owner.append(number)
        self.keys.append(key)
        self.readers.append(())
        self.rows.append(None)
        self._profile.append(NONE)
        return row

    def row_of(self, key: object) -> int:
        """The batch's row, or -1."""
        index = self._index.get(getattr(key, "plan_key", None))
        if index is None:
            return -1
        first, per, rows = index
        place = (key.epoch - first) * per + key.iteration  # type: ignore[attr-defined]
        if not 0 <= place < len(rows) or not 0 <= key.iteration < per:  # type: ignore
            return -1
        return rows[place]

    def plan(self, row: int) -> TaskPlan:
        return self._plans[self._owner[row]]

    def resolved(self, row: int, view_row: ViewRow, view: ViewPlan) -> None:
        """The batch's clips (`view_row`) and its plan's other fields (`view`'s)."""
        self.rows[row] = view_row
        profile = (view.task, view.shape, view.dtype, view.layout)
        number = self._profile_of.get(profile)
        if number is None:
            number = self._profile_of[profile] = len(self._profiles)
            self._profiles.append(profile)
        self._profile[row] = number

    def view_plan(self, row: int) -> ViewPlan | None:
        """The batch's plan, made now from its row; None when not resolved here."""
        from sandfs.plan.records import ViewPlan
        number = self._profile[row]
        if number == NONE:
            return None
        task, shape, dtype, layout = self._profiles[number]
        key = self.keys[row]
        return ViewPlan(task, key.epoch, key.iteration, self.rows[row].clips, shape, dtype,
                        layout)


class RowMap(MutableMapping):
    """A mapping over the rows of one or more `BatchRows` (a window and the parts added to
    it), read by arithmetic; what is set or deleted afterwards is kept beside them, with a
    dict's order: a row's key where its row is, keys set anew after the rows."""

    __slots__ = ("_deleted", "_extra", "_override", "_tables")

    def __init__(self, tables: list[BatchRows]) -> None:
        self._tables = tables
        self._override: dict = {}  # rows' keys set since, at their row's place
        self._extra: dict = {}  # keys not at a row's place
        self._deleted: set = set()  # rows' keys deleted since

    def _value(self, table: BatchRows, row: int):
        raise NotImplementedError

    def _holds(self, table: BatchRows, row: int) -> bool:
        return True

    def _find(self, key: object) -> tuple[BatchRows, int] | None:
        for table in self._tables:
            row = table.row_of(key)
            if row >= 0 and self._holds(table, row):
                return table, row
        return None

    # the overlay is looked at only when it holds anything: a key's hash is Python code
    def __getitem__(self, key):
        if self._extra and key in self._extra:
            return self._extra[key]
        if self._override and key in self._override:
            return self._override[key]
        if not (self._deleted and key in self._deleted):
            found = self._find(key)
            if found is not None:
                return self._value(*found)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if (self._extra and key in self._extra) or (self._override and key in self._override):
            return True
        return not (self._deleted and key in self._deleted) and self._find(key) is not None

    def __setitem__(self, key, value) -> None:
        if key not in self._extra and key not in self._deleted and self._find(key):
            self._override[key] = value
        else:
            self._extra[key] = value

    def __delitem__(self, key) -> None:
        if key in self._extra:
            del self._extra[key]
        elif key in self._override or (key not in self._deleted and self._find(key)):
            self._override.pop(key, None)
            self._deleted.add(key)
        else:
            raise KeyError(key)

    def _rows(self) -> Iterator[tuple[object, BatchRows, int]]:
        """(key, table, row) of the keys held at a row's place, in order."""
        seen: set = set()  # a key in two tables (a window's parts) once, at its first row
        hidden, parts = self._deleted | self._extra.keys(), len(self._tables) > 1
        for table in self._tables:
            for row, key in enumerate(table.keys):
                if (self._holds(table, row) and not (hidden and key in hidden)
                        and not (parts and key in seen)):
                    if parts:
                        seen.add(key)
                    yield key, table, row

    def __iter__(self) -> Iterator:
        for key, _, _ in self._rows():
            yield key
        yield from self._extra

    def items(self) -> Iterator[tuple]:  # type: ignore[override]
        """Each key and value, with no lookup of the key made again."""
        override = self._override
        for key, table, row in self._rows():
            yield key, override[key] if override and key in override else self._value(table, row)
        yield from self._extra.items()

    def values(self) -> Iterator:  # type: ignore[override]
        return (value for _, value in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def absorb(self, other: RowMap) -> None:
        """The keys of `other` not here join (a window's rest): its tables after these, and
        its own overlay."""
        for table in other._tables:
            if table not in self._tables:
                self._tables.append(table)
        for key in other._deleted:
            if key not in self:
                self._deleted.add(key)
        for key, value in (*other._override.items(), *other._extra.items()):
            if key not in self:
                self[key] = value

    def copy(self) -> RowMap:
        """A copy sharing the rows (they never change), with copies of the overlay."""
        copied = type(self)(list(self._tables))
        copied._override, copied._extra = dict(self._override), dict(self._extra)
        copied._deleted = set(self._deleted)
        return copied

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} batches)"


class ViewsMap(RowMap):
    """key -> (task plan, epoch, iteration), as `WindowPlan.views` holds them."""

    __slots__ = ()

    def _value(self, table: BatchRows, row: int):
        key = table.keys[row]
        return table.plan(row), key.epoch, key.iteration


class ReadersMap(RowMap):
    """key -> its (task, position) readers."""

    __slots__ = ()

    def _value(self, table: BatchRows, row: int):
        return table.readers[row]


class ViewPlansMap(RowMap):
    """key -> its `ViewPlan`, made from its row: only the batches resolved here."""

    __slots__ = ()

    def _holds(self, table: BatchRows, row: int) -> bool:
        return table._profile[row] != NONE

    def _value(self, table: BatchRows, row: int):
        return table.view_plan(row)
