"""The board holds a state for the batches in flight only: the rest of a window's batches are
answered from its plan, as a state made for each of them answered before."""

from __future__ import annotations

import numpy as np
import pytest

from sandfs.sched import work
from sandfs.sched.board import BatchBoard, ReadyView
from tests.helpers.plans import fake_videos, make_plan


def test_a_window_s_batches_are_on_the_board_with_no_state_until_one_is_taken(tmp_path):
    plan = make_plan(tmp_path, fake_videos(24), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    window = planned.plan
    board = BatchBoard()
    board.add_window(planned)
    keys = list(window.views)
    assert len(keys) > 8 and not list(board.views.held())
    assert set(board.views) == set(keys) and len(board.views) == len(keys)
    for key in keys:
        assert key in board.views and board.is_planned(key)
        assert board.state_of(key) == "planned"
        assert board.held_view(key) == window.view_plans[key]
        assert board.views.plan_of(key) is plan
    assert not list(board.views.held())  # looking made none
    first, second, third, fourth = keys[:4]
    assert board.views.get(first) is None and first not in dict(board.views.held())
    with pytest.raises(KeyError):
        board.views[first]  # no state made by a look
    state = board.views.state(first)  # a job takes its slots: held from now on, the same one
    assert board.views[first] is state and dict(board.views.held()) == {first: state}
    assert state.view == window.view_plans[first] and (state.epoch, state.iteration) == (
        first.epoch, first.iteration)
    board.buffer(first)
    for slot in range(state.slots):
        state.add_in_memory(slot)
    assert board.state_of(first) == "materializing"
    assert board.complete_if_full(first, lambda: {plan.name}) is state
    assert first not in board.views and board.state_of(first) == "ready"
    assert board.is_planned(first) and board.held_view(first) is state.view
    board.fail(second, "a step failed")
    board.drop(third)
    assert second not in board.views and third not in board.views
    assert board.state_of(second) == "failed" and not board.is_planned(third)
    assert len(board.views) == len(keys) - 3 and not list(board.views.held())
    board.replan(third, 0, window.views[third], window.readers[third], lambda use, info: False)
    assert third in board.views and board.views.peek(third) is not None
    assert fourth in board.views and board.views.peek(fourth) is None
    assert len(board.views) == len(keys) - 2 == len(list(board.views))
    board.drop_window(0, window.views)
    assert not list(board.views) and not list(board.views.held())
    assert board.state_of(fourth) == "planned" and not board.is_planned(fourth)


def test_a_batch_ready_when_its_window_comes_stays_off_the_board(tmp_path):
    plan = make_plan(tmp_path, fake_videos(12), epochs=4)
    planned = work.plan_active_window([plan], 0, None, "leaves")
    board = BatchBoard()
    other = next(iter(planned.plan.views))
    board.ready[other] = ReadyView(np.zeros(8, np.uint8), set())
    board.add_window(planned)
    assert other not in board.views and board.state_of(other) == "ready"
    assert len(board.views) == len(planned.plan.views) - 1 and not list(board.views.held())
    assert all(u.view != other for uses in board.pending.values() for u in uses)


def test_a_window_s_later_parts_are_found_through_its_first_plan(tmp_path):
    """As the planner adds a window's rest (`WindowBook.extend`, then the board): its batches
    are rows of the first part's table, and the board looks them up there, not in a list of
    parts growing with them."""
    plan = make_plan(tmp_path, fake_videos(24), epochs=4)
    lead = {plan.videos[0].path}
    first = work.plan_active_window([plan], 0, None, "leaves", lead=lead)
    board = BatchBoard()
    board.add_window(first)
    rest = work.plan_active_window([plan], 0, None, "leaves", skip=lead,
                                   resolved=first.plan.view_plans)
    lead_keys = set(first.plan.views)
    first.plan.take_rest(rest.plan)
    board.add_window(rest)
    assert board.views._parts[0] == [first.plan]
    assert set(board.views) == set(rest.plan.views) and not list(board.views.held())
    key = next(k for k in rest.plan.views if k not in lead_keys)
    assert board.views.plan_of(key) is plan and board.held_view(key) == rest.plan.view_plans[key]
