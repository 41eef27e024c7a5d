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

from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.window import ViewKey, WindowPlan
from sandfs.sched.viewstate import ViewState


class OnBoard:
    """Batches of active windows, not ready yet, by key: a state for each in flight, made by
    `state` and kept until the batch leaves; the others found in their windows' plans."""

    def __init__(self) -> None:
        self._held: dict[ViewKey, ViewState] = {}  # the batches in flight
        self._parts: dict[int, list[WindowPlan]] = {}  # each window's plans (whole, or parts)
        self._gone: dict[int, set[ViewKey]] = {}  # batches of a window that left the board

    # -- reading ----------------------------------------------------------------------------

    def _planned(self, key: ViewKey) -> tuple[int, WindowPlan] | None:
        """The window and plan of a batch on the board without a state yet (a few windows)."""
        for window, parts in self._parts.items():
            for part in parts:
                if key in part.views:
                    return None if key in self._gone[window] else (window, part)
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
        """Counted from the windows' mappings and what left, not a walk of their batches."""
        if any(len(parts) > 1 for parts in self._parts.values()):
            return sum(1 for _ in self)  # parts the board was given as they are (no book)
        count = len(self._held)
        for window, (plan,) in ((w, p) for w, p in self._parts.items() if p):
            views = plan.views
            count += len(views) - sum(1 for key in self._gone[window] if key in views)
            count -= sum(1 for key in self._held if key in views and key not in self._gone[window])
        return count

    # -- changing ---------------------------------------------------------------------------

    def add_window(self, plan: WindowPlan, ready: Mapping[ViewKey, object]) -> set[ViewKey]:
        """A window's batches (or a part's) join the board, but those `ready` already, and
        those of the window that left it already; the keys of `plan` not on the board."""
        window = plan.window
        parts = self._parts.setdefault(window, [])
        if not parts or any(key not in parts[0].views for key in plan.views):
            parts.append(plan)  # else a later part its window's plan holds (`take_rest`)
        gone = self._gone.setdefault(window, set())
        gone.update(key for key in ready if key in plan.views and key not in self._held)
        return {key for key in gone if key in plan.views}

    def hold(self, key: ViewKey, state: ViewState) -> None:
        """The batch's state from now on (planned again, or its window's new batch)."""
        self._held[key] = state
        for gone in self._gone.values():
            gone.discard(key)

    def rejoin(self, keys: Mapping[ViewKey, object]) -> None:
        """Batches a window holds again (a task joined with them): on the board."""
        for gone in self._gone.values():
            gone.difference_update(keys)

    def leave(self, key: ViewKey) -> ViewState | None:
        """The batch leaves the board (made, failed or dropped); its state, if it had one."""
        found = self._planned(key)
        if found is not None:
            self._gone[found[0]].add(key)
        return self._held.pop(key, None)

    def drop_window(self, window: int) -> None:
        """The window leaves: its batches' records (`leave` each of its states)."""
        self._parts.pop(window, None)
        self._gone.pop(window, None)
