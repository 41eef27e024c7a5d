"""Planning threads stop early when their caller is cancelled (shutdown): a window of 250,000
videos takes tens of seconds to plan, and the daemon waited for it to end."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from sandfs.plan.window import STOP_PLANNING, PlanningStopped, plan_window, stop_if_asked
from tests.helpers.plans import make_plan
from tests.unit.test_scheduler import scheduler_for


def test_planning_a_window_stops_when_asked(tmp_path):
    plan = make_plan(tmp_path, videos=None, epochs=4, k_epochs=4)
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # after the first epochs' draws

    whole = plan_window([plan], 0)
    asked.clear()
    token = STOP_PLANNING.set(stop)
    try:
        with pytest.raises(PlanningStopped):
            plan_window([plan], 0)
    finally:
        STOP_PLANNING.reset(token)
    assert len(asked) == 3 and whole.views  # it stopped at the third look, before the end
    assert plan_window([plan], 0).views.keys() == whole.views.keys()  # nothing left behind


async def test_a_cancelled_planning_thread_ends_without_finishing(tmp_path):
    """`_plan_in_thread` cancelled: the thread sees the stop at its next check and the call
    ends with the cancellation, not after the thread's work."""
    _, scheduler, _ = scheduler_for(tmp_path)
    started, stopped = threading.Event(), threading.Event()

    def long_planning() -> None:  # checks as planning does, for up to 30 s
        started.set()
        give_up = time.monotonic() + 30
        try:
            while time.monotonic() < give_up:
                stop_if_asked()
                time.sleep(0.001)
        except PlanningStopped:
            stopped.set()
            raise

    began = time.monotonic()
    with trio.move_on_after(0.2) as scope:
        await scheduler.planner._plan_in_thread(long_planning)
    assert scope.cancelled_caught and started.is_set() and stopped.is_set()
    assert time.monotonic() - began < 5
    assert scheduler.planner._quiet.is_set()  # pruning may go on
