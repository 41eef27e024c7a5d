"""The board's batches (`sched/onboard.py`) against plain sets: what is on the board, its count
and what a look makes, over random leaves, holds, joins and tasks leaving; a lookup asks one
window once its plan key was seen."""

from __future__ import annotations

import random

import pytest

from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewPlansMap, ViewsMap
from sandfs.plan.window import ViewKey, WindowPlan
from sandfs.sched.onboard import OnBoard


class FakePlan:
    """What `BatchRows` asks of a task plan: its windows of k epochs."""

    k_epochs, iterations_per_epoch = 2, 6

    def window_of(self, epoch: int) -> int:
        return epoch // self.k_epochs

    def window_epochs(self, window: int) -> range:
        return range(window * self.k_epochs, (window + 1) * self.k_epochs)


def window_plan(window: int, plan_keys: tuple[str, ...], rng: random.Random) -> WindowPlan:
    table, plan = BatchRows(), FakePlan()
    for plan_key in plan_keys:
        for epoch in plan.window_epochs(window):
            for iteration in range(plan.iterations_per_epoch):
                if rng.random() < 0.8:
                    table.add(ViewKey(plan_key, epoch, iteration), plan)
    return WindowPlan(window, {}, ViewsMap(table), ReadersMap(table), {}, ViewPlansMap(table))


class Model:
    """The board's rules with sets: a batch is on it when held, or in a window's views and
    not gone from that window."""

    def __init__(self) -> None:
        self.held: dict = {}
        self.gone: dict[int, set] = {}
        self.windows: dict[int, WindowPlan] = {}

    def on(self) -> set:
        planned = {key for w, plan in self.windows.items() for key in plan.views
                   if key not in self.gone[w]}
        return planned | set(self.held)

    def leave(self, key) -> None:
        for window, plan in self.windows.items():
            if key in plan.views and key not in self.gone[window]:
                self.gone[window].add(key)
        self.held.pop(key, None)

    def hold(self, key, state) -> None:
        self.held[key] = state
        for gone in self.gone.values():
            gone.discard(key)


@pytest.mark.parametrize("seed", range(6))
def test_the_count_and_membership_are_those_of_sets_over_random_operations(seed):
    rng = random.Random(seed)
    board, model = OnBoard(), Model()
    plans = {w: window_plan(w, (f"A{w}", f"B{w}"), rng) for w in (0, 1)}
    universe = [ViewKey(f"{p}{w}", e, i) for w in (0, 1) for p in "ABJ"
                for e in FakePlan().window_epochs(w) for i in range(7)]
    for window, plan in plans.items():
        ready = {key: None for key in rng.sample(universe, 5)}
        board.add_window(plan, ready)
        model.windows[window], model.gone[window] = plan, set()
        for key in ready:
            if key in plan.views and key not in model.held:
                model.gone[window].add(key)
    for step in range(400):
        key, choice = rng.choice(universe), rng.random()
        window = key.epoch // FakePlan.k_epochs
        plan = model.windows.get(window)
        if choice < 0.35:
            assert (board.leave(key) is not None) == (key in model.held)
            model.leave(key)
        elif choice < 0.5:
            state = object()
            board.hold(key, state)
            model.hold(key, state)
        elif choice < 0.6 and plan is not None:  # a task joins: its batches, on the board
            plan.views[key], plan.readers[key] = (None, key.epoch, key.iteration), ()
            board.rejoin({key: None})
            for gone in model.gone.values():
                gone.discard(key)
        elif choice < 0.7 and plan is not None and key in plan.views:  # a task leaves
            del plan.views[key]
        elif choice < 0.72 and plan is not None:  # its window leaves, and comes again
            board.drop_window(window)
            del model.windows[window], model.gone[window]
            board.add_window(plan, {})
            model.windows[window], model.gone[window] = plan, set()
        on = model.on()
        assert (key in board) == (key in on), (seed, step, key)
        assert board.get(key) is model.held.get(key)
        assert len(board) == len(on) == len(list(board)), (seed, step)
        assert set(board) == on


def test_a_look_makes_no_state_and_state_makes_one():
    """`get`, `[]`, membership and `held` make none (the board holds what is in flight);
    `state` makes the one a job takes; there is no `values()` making one a batch."""
    board = OnBoard()
    plan = window_plan(0, ("A0",), random.Random(1))
    board.add_window(plan, {})
    keys = list(plan.views)
    assert all(key in board and board.get(key) is None for key in keys)
    with pytest.raises(KeyError):
        board[keys[0]]
    assert not list(board.held()) and not hasattr(board, "values")
    assert not hasattr(board, "items")


def test_a_lookup_asks_only_its_window_once_its_plan_key_was_seen():
    """A board lookup was one window mapping's lookup a window, and a set's: a task joining
    at 250,000 videos looks up 1.25M uses on the event loop. Its count (`views_planned`,
    every status scrape) looked up each batch that left its window."""
    rng = random.Random(2)
    board, asked = OnBoard(), []
    plans = [window_plan(w, (f"A{w}",), rng) for w in (0, 1)]

    class Counting(ViewsMap):
        __slots__ = ()

        def __contains__(self, key):
            asked.append(key)
            return super().__contains__(key)

    counted = Counting(plans[0].views.table)
    plans[0] = WindowPlan(0, {}, counted, plans[0].readers, {}, plans[0].view_plans)
    for plan in plans:
        board.add_window(plan, {})
    keys = list(plans[1].views)
    assert keys[0] in board  # learns its plan key's window
    asked.clear()
    assert all(key in board for key in keys) and not asked
    left = list(plans[0].views)
    for key in left:
        board.leave(key)
    asked.clear()
    assert len(board) == len(keys) and not asked  # what left is counted, not walked
