"""The batches of the active windows as the board sees them: a `ViewState` only for those in
flight, the rest answered from their windows' plans (SAND §5.4: the board holds what is in
flight, not the window). A window of 250,000 videos has 156,000 batches; a state and a dict
entry each were 17 bytes a clip of window 0 at 10,000 videos
(docs/performance.md#a-windows-batches-and-the-board).

A batch is on the board while its window is (`add_window` to `drop_window`) and it has not
left it: made (ready), failed or dropped (`leave`). Its state is made when something holds it
(`state`: a job taking its slots, a buffer, a read back; `hold`: slots on disk, a batch
planned again); every other look (`[]`, `get`, `plan_of`, `view_of`, membership, `held`)
makes none."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from sandfs.plan.batchrows import HELD_BESIDE, RowMap
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.window import ViewKey, WindowPlan
from sandfs.sched.viewstate import ViewState


class _Gone:
    """The batches of a window that left the board: a byte a row of its table (a set of
    100,000 keys was 4 MB, and counting those still in the window walked it), and a set for
    the keys with no row (a dict of views, or a joiner's overlay)."""

    __slots__ = ("count", "keys", "rows", "table", "views")

    def __init__(self, views: object) -> None:
        self.views = views if isinstance(views, RowMap) else None  # the window's first plan's
        self.table = getattr(views, "table", None)  # a `BatchRows`, or None (a dict)
        self.rows = bytearray()
        self.count = 0  # bytes set in `rows`
        self.keys: set[ViewKey] = set()

    def _row(self, key: ViewKey) -> int:
        return -1 if self.table is None else self.table.row_of(key)

    def has_row(self, row: int) -> bool:
        return row < len(self.rows) and self.rows[row] == 1

    def __contains__(self, key: ViewKey) -> bool:
        row = self._row(key)
        if row < 0:
            return bool(self.keys) and key in self.keys
        return row < len(self.rows) and self.rows[row] == 1

    def add(self, key: ViewKey) -> None:
        row = self._row(key)
        if row < 0:
            self.keys.add(key)
            return
        if row >= len(self.rows):
            self.rows.extend(bytes(len(self.table) - len(self.rows)))
        if not self.rows[row]:
            self.rows[row] = 1
            self.count += 1

    def discard(self, key: ViewKey) -> None:
        row = self._row(key)
        if row < 0:
            self.keys.discard(key)
        elif row < len(self.rows) and self.rows[row]:
            self.rows[row] = 0
            self.count -= 1

    def __bool__(self) -> bool:
        return self.count > 0 or bool(self.keys)

    def __iter__(self) -> Iterator[ViewKey]:
        if self.count:
            keys = self.table.keys
            yield from (keys[row] for row in np.flatnonzero(np.frombuffer(self.rows, np.uint8)))
        yield from self.keys

    def within(self, views: Mapping[ViewKey, object]) -> int:
        """How many of these are batches of `views`: the rows set but those deleted from it
        since (a task left), and the keys it holds; no walk of the rows."""
        deleted = views.deleted() if self.table is not None else ()  # type: ignore[attr-defined]
        return (self.count - sum(1 for key in deleted if key not in views and key in self)
                + sum(1 for key in self.keys if key in views))


class OnBoard:
    """Batches of active windows, not ready yet, by key: a state for each in flight, made by
    `state` and kept until the batch leaves; the others found in their windows' plans."""

    def __init__(self) -> None:
        self._held: dict[ViewKey, ViewState] = {}  # the batches in flight
        self._parts: dict[int, list[WindowPlan]] = {}  # each window's plans (whole, or parts)
        self._gone: dict[int, _Gone] = {}  # batches of a window that left the board
        # a batch's plan key names its window (`TaskPlan.plan_key`): learnt as keys are found
        self._window_of: dict[object, int] = {}

    # -- reading ----------------------------------------------------------------------------

    def _planned(self, key: ViewKey) -> tuple[int, WindowPlan] | None:
        """The window and plan of a batch on the board (a state or not): its row looked up
        once in its window's table, once its plan key was seen (a window's batches share a
        few); other windows and parts walked only for a key not found so."""
        window = self._window_of.get(getattr(key, "plan_key", None))
        if window is not None:
            gone = self._gone[window]
            if gone.views is not None:  # the window's first plan, a mapping over rows
                row = gone.views.place(key)
                if row >= 0:
                    return None if gone.has_row(row) else (window, self._parts[window][0])
                if row == HELD_BESIDE:
                    return None if key in gone else (window, self._parts[window][0])
        for other, parts in self._parts.items():
            for part in parts:
                if key in part.views:
                    self._window_of[key.plan_key] = other
                    return None if key in self._gone[other] else (other, part)
        return None

    def __contains__(self, key: object) -> bool:
        return key in self._held or self._planned(key) is not None  # type: ignore[arg-type]

    def __getitem__(self, key: ViewKey) -> ViewState:
        """The batch's state when it is in flight (KeyError for one planned only)."""
        return self._held[key]

    def get(self, key: ViewKey, default: ViewState | None = None) -> ViewState | None:
        """The batch's state when it is in flight, else `default`: none is made."""
        return self._held.get(key, default)

    peek = get

    def state(self, key: ViewKey) -> ViewState:
        """The batch's state, made now when it has none: the batch is in flight from now on
        (a job takes its slots, a buffer, a read back) until it leaves; KeyError off it."""
        state = self._held.get(key)
        if state is not None:
            return state
        found = self._planned(key)
        if found is None:
            raise KeyError(key)
        part = found[1]
        state = self._held[key] = ViewState.planned(*part.views[key], part.view_plans.get(key))
        return state

    def plan_of(self, key: ViewKey) -> TaskPlan | None:
        """The task plan of a batch on the board, without a state made for it."""
        state = self._held.get(key)
        if state is not None:
            return state.plan
        found = self._planned(key)
        return None if found is None else found[1].views[key][0]

    def view_of(self, key: ViewKey) -> ViewPlan | None:
        """The batch's plan where the board has it resolved (its state's, or its window's)."""
        state = self._held.get(key)
        if state is not None:
            return state.view
        found = self._planned(key)
        return None if found is None else found[1].view_plans.get(key)

    def held(self) -> Iterator[tuple[ViewKey, ViewState]]:
        """The batches in flight and their states."""
        return iter(self._held.items())

    def __iter__(self) -> Iterator[ViewKey]:
        """Every batch on the board (those planned only too): a walk of its windows."""
        yield from self._held
        seen = set(self._held)
        for window, parts in self._parts.items():
            for part in parts:
                for key in part.views:
                    if key not in seen and key not in self._gone[window]:
                        seen.add(key)
                        yield key

    def __len__(self) -> int:
        """Counted from the windows' mappings, what left them and the states in flight, not a
        walk of their batches (a status asks it at every scrape)."""
        if any(len(parts) > 1 for parts in self._parts.values()):
            return sum(1 for _ in self)  # parts the board was given as they are (no book)
        count = len(self._held)
        for window, (plan,) in ((w, p) for w, p in self._parts.items() if p):
            views, gone = plan.views, self._gone[window]
            count += len(views) - gone.within(views)
            count -= sum(1 for key in self._held if key in views and key not in gone)
        return count

    # -- changing ---------------------------------------------------------------------------

    def add_window(self, plan: WindowPlan, ready: Mapping[ViewKey, object]) -> set[ViewKey]:
        """A window's batches (or a part's) join the board, but those `ready` already, and
        those of the window that left it already; the keys of `plan` not on the board."""
        window = plan.window
        parts = self._parts.setdefault(window, [])
        if not parts or next(iter(plan.views), None) not in parts[0].views:
            parts.append(plan)  # else a later part its window's plan took (`take_rest`)
        gone = self._gone.get(window)
        if gone is None:
            gone = self._gone[window] = _Gone(parts[0].views)
        for key in ready:
            if key in plan.views and key not in self._held:
                gone.add(key)
        return {key for key in gone if key in plan.views}

    def hold(self, key: ViewKey, state: ViewState) -> None:
        """The batch's state from now on (planned again, or its window's new batch)."""
        self._held[key] = state
        for gone in self._gone.values():
            gone.discard(key)

    def rejoin(self, keys: Mapping[ViewKey, object]) -> None:
        """Batches a window holds again (a task joined with them): on the board."""
        for gone in self._gone.values():
            if gone:
                for key in keys:
                    gone.discard(key)

    def leave(self, key: ViewKey) -> ViewState | None:
        """The batch leaves the board (made, failed or dropped); its state, if it had one."""
        found = self._planned(key)
        if found is not None:
            self._gone[found[0]].add(key)
        return self._held.pop(key, None)

    def drop_window(self, window: int) -> None:
        """The window's plans and what left it go; its states in flight stay until each
        leaves (`BatchBoard.drop_window` drops them)."""
        self._parts.pop(window, None)
        self._gone.pop(window, None)
        for plan_key in [k for k, w in self._window_of.items() if w == window]:
            del self._window_of[plan_key]
