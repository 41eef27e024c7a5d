"""The board's batches (`sched/onboard.py`): what a look makes."""

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
