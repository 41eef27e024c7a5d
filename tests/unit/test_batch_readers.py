"""A batch's readers derived from its plan key's tasks and its place (`BatchRows.readers_of`),
with a tuple only where the bits cannot say them, read through `ReadersMap` as the dict of
tuples it replaces while tasks join, leave and snapshots are taken: a seeded random walk
against that dict; a window's rows against readers found from its task plans alone."""

from __future__ import annotations

import copy
import itertools
import pickle
import random
import sys

import numpy as np
import pytest

from sandfs.plan.batchcolumns import TableRow
from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewsMap
from sandfs.plan.uses import ViewRow, batches
from sandfs.plan.window import ViewKey, plan_window, view_key
from tests.helpers.plans import fake_videos, make_plan


class FakePlan:
    """What `BatchRows` asks of a task plan: its windows of k epochs."""

    k_epochs, iterations_per_epoch = 3, 5

    def __init__(self, name: str) -> None:
        self.name = name

    def window_of(self, epoch: int) -> int:
        return epoch // self.k_epochs

    def window_epochs(self, window: int) -> range:
        return range(window * self.k_epochs, (window + 1) * self.k_epochs)


def planned(rng: random.Random, plan: FakePlan, tasks: int) -> tuple[BatchRows, dict]:
    """A window's rows as `_batch_rows` adds them (a task at a time, some of its batches
    each) and some added with readers as they are (a later part's: odd positions, a task
    twice, more tasks than bits); the dict of tuples they stand for."""
    table, reference = BatchRows(), {}
    names = [f"t{i}" for i in range(tasks)]
    per = plan.iterations_per_epoch
    for name in names:
        for plan_key in ("a", "b"):
            for epoch in plan.window_epochs(0):
                for iteration in range(per):
                    if rng.random() < 0.3:
                        continue
                    key = ViewKey(plan_key, epoch, iteration)
                    row = table.row_of(key)
                    if row < 0:
                        row = table.add(key, plan)
                        reference[key] = ()
                    table.add_reader(row, name)
                    reference[key] += ((name, epoch * per + iteration),)
    for epoch in plan.window_epochs(0):
        for iteration in range(per):
            key = ViewKey("c", epoch, iteration)
            readers = tuple((rng.choice(names), rng.choice([epoch * per + iteration, 99]))
                            for _ in range(rng.randrange(0, 4)))
            table.add(key, plan, readers)
            reference[key] = readers
    return table, reference


@pytest.mark.parametrize(("per", "tasks", "keep"), [(5, 3, 0.7), (400, 2, 0.02),
                                                    (400, 70, 0.3)])
def test_a_task_epochs_rows_added_at_once_read_as_rows_added_one_at_a_time(per, tasks, keep):
    """`add_batches` and `add_readers` (a window's planning, a task epoch at a time) make the
    rows, keys and readers `add` and `add_reader` make a batch at a time: rows a task of the
    plan key added before taken as they are, places few (a dict) or many (an array), more
    tasks than a row's bits."""
    rng = random.Random(per * tasks)
    plan = FakePlan("p")
    plan.iterations_per_epoch = per
    one, many = BatchRows(), BatchRows()
    for name in [f"t{i}" for i in range(tasks)]:
        for plan_key in ("a", "b"):
            for epoch in plan.window_epochs(0):
                iterations = [i for i in range(per) if rng.random() < keep]
                if not iterations:
                    continue
                for iteration in iterations:
                    key = ViewKey(plan_key, epoch, iteration)
                    row = one.row_of(key)
                    one.add_reader(row if row >= 0 else one.add(key, plan), name)
                rows, new = many.add_batches(ViewKey(plan_key, epoch, 0), plan,
                                             np.array(iterations))
                many.columns.add_readers(rows, name)
                assert rows.tolist() == [one.row_of(ViewKey(plan_key, epoch, i))
                                         for i in iterations]
                assert set(new.tolist()) <= set(iterations)
    assert len(many) == len(one) and len(many.columns) == len(one.columns)
    for row in range(len(one)):
        key = one.key(row)
        assert many.key(row) == key and type(many.key(row)) is ViewKey
        assert many.row_of(key) == row and many.place(row) == one.place(row)
        assert many.readers_of(row) == one.readers_of(row)
    for epoch in range(4):  # places never added read as none
        for iteration in (0, per - 1, per):
            key = ViewKey("a", epoch, iteration)
            assert many.row_of(key) == one.row_of(key)


class Held:
    """Where the walk's mapping holds each key: at its row ("row"), set anew at its row
    ("override"), beside the rows ("extra"), deleted from its row ("deleted")."""

    def __init__(self, table: BatchRows, keys) -> None:
        self.state = dict.fromkeys(keys, "row")
        self.table = table

    def set(self, key) -> None:
        at_row = self.state.get(key) in ("row", "override")
        self.state[key] = "override" if at_row else "extra"

    def delete(self, key) -> None:
        if self.state[key] in ("row", "override"):
            self.state[key] = "deleted"
        else:
            del self.state[key]


@pytest.mark.parametrize("seed", range(6))
def test_readers_read_as_the_dict_of_tuples_they_replace(seed):
    rng = random.Random(seed)
    plan = FakePlan("p")
    table, reference = planned(rng, plan, rng.choice([1, 3, 70]))  # 70: past a row's bits
    readers, views = ReadersMap(table), ViewsMap(table)
    assert [table.readers_of(table.row_of(k)) for k in reference] == list(reference.values())
    assert list(readers.items()) == list(reference.items())
    held, snapshots, added = Held(table, reference), [], 0
    for _ in range(200):
        keys = list(reference)
        action = rng.random()
        if action < 0.25 and keys:  # a task joins a batch
            key = rng.choice(keys)
            more = ((f"j{rng.randrange(3)}", key.epoch * 5 + key.iteration),)
            readers[key] = reference[key] = reference[key] + more
            held.set(key)
        elif action < 0.45 and keys:  # a task leaves: its batches lose it, or go
            name = rng.choice(sorted({t for r in reference.values() for t, _ in r} or {"x"}))
            for key in keys:
                left = tuple(r for r in reference[key] if r[0] != name)
                if left:
                    if len(left) < len(reference[key]):
                        readers[key] = reference[key] = left
                        held.set(key)
                else:
                    del readers[key], reference[key]
                    held.delete(key)
        elif action < 0.6:  # a batch set anew, a row's once deleted or none's
            key = ViewKey(rng.choice("abcz"), rng.randrange(3), rng.randrange(5))
            readers[key] = reference[key] = (("n", 1),)
            held.set(key)
        elif action < 0.7:  # a later part's row (`take`): tasks new to its plan key, or a key new
            free = [ViewKey(k, e, i) for k in "abd" for e in range(3) for i in range(5)
                    if table.row_of(ViewKey(k, e, i)) < 0 and ViewKey(k, e, i) not in held.state]
            if free:
                key, added = rng.choice(free), added + 1
                position = key.epoch * 5 + key.iteration
                new = tuple((f"late{added}.{i}", position) for i in range(rng.randrange(1, 3)))
                old = tuple((t, position) for t in rng.sample(["t0", "j0", "j1"], 2))
                reference[key] = new + old if rng.random() < 0.5 else old + new
                table.add(key, plan, reference[key])
                held.state[key] = "row"
        elif action < 0.8:
            snapshots.append((readers.copy(), dict(reference)))
        if not added:  # a row added since moves ahead of the keys set beside the rows
            assert list(readers.items()) == list(reference.items())
        assert dict(readers.items()) == reference
        assert len(readers) == len(reference)
        assert all(readers.get(key) == value for key, value in reference.items())
    assert added  # the seeds add rows
    deleted = {key for key, where in held.state.items() if where == "deleted"}
    assert any(deleted & then.keys() for _, then in snapshots)  # copies of keys deleted since
    for copied, then in snapshots:  # as when copied: its own overlay, its rows unchanged
        assert set(copied) == set(then)
        assert {key: copied[key] for key in then} == then
    assert len(views) == len(table)  # views untouched: every row


def test_a_table_row_reads_its_batch_and_is_sent_as_the_view_row_it_stands_for(tmp_path):
    """A window's `ViewRow`s are its rows' (`TableRow`): their fields as planned, one a
    batch shared by its videos' uses; pickled (a worker process) or copied as a `ViewRow`."""
    for name in "abc":
        (tmp_path / name).mkdir()
    listed = fake_videos(9)
    plans = [make_plan(tmp_path / name, listed, task=name, k_epochs=2, epochs=2, seed=seed)
             for name, seed in (("a", 0), ("b", 3), ("c", 0))]  # c: a's twin, b its own
    window = plan_window(plans, 0)
    rows = {row.place: row for work in window.videos.values() for row in batches(work.uses)}
    assert len(rows) == len(window.view_plans)  # one a batch: its videos' uses read its row
    other = plan_window(plans, 0)  # the same rows' numbers, of other columns
    for (columns, number), row in rows.items():  # made when read: equal where the same row
        again = columns.view_row(number)
        assert again is not row and again == row and hash(again) == hash(row)
        assert other.views.table.columns.view_row(number) != row
    assert all(a != b for a, b in itertools.combinations(rows.values(), 2))
    reference = planned_readers(plans, 0)
    assert {row.view: row.readers for row in rows.values()} == reference
    assert any(len(readers) == 2 for readers in reference.values())
    for row in rows.values():
        assert type(row) is TableRow
        assert tuple(row.clips) == tuple(window.view_plans[row.view].clips)
        for sent in (pickle.loads(pickle.dumps(row)), copy.copy(row)):
            assert type(sent) is ViewRow and sent.view == row.view
            assert sent.readers == row.readers and tuple(sent.clips) == tuple(row.clips)


def planned_readers(plans, window: int, keys=None) -> dict:
    """The dict of tuples a window's readers stand for, from the task plans alone: each task
    reads each batch of its window epochs at its place, in the order of `plans`."""
    reference = {}
    for plan in plans:
        per = plan.iterations_per_epoch
        for epoch in plan.window_epochs(window):
            for iteration in range(per):
                key = view_key(plan, epoch, iteration)
                if keys is None or key in keys:
                    reference.setdefault(key, ())
                    reference[key] += ((plan.name, epoch * per + iteration),)
    return reference


def test_a_window_planned_in_parts_takes_a_joining_tasks_rows_in_their_own_bit_order(tmp_path):
    """A task joining while its window is planned in parts: the rest's table names the
    plan key's tasks in another order (the joiner first) than the lead part's; the rows
    taken into the lead's table read as the rest planned them."""
    for name in "ab":
        (tmp_path / name).mkdir()
    listed = fake_videos(24)
    first = make_plan(tmp_path / "a", listed, task="a", k_epochs=2, epochs=2)
    joiner = make_plan(tmp_path / "b", listed, task="b", k_epochs=2, epochs=2)  # a's twin
    assert first.plan_key(0) == joiner.plan_key(0)
    lead_videos = frozenset(first.listed[i].path for i in first.batch_slots(0, 0))
    lead = plan_window([first], 0, lead=lead_videos)
    rest = plan_window([joiner, first], 0, skip=lead_videos)
    lead_keys, rest_keys = set(lead.readers), set(rest.readers)
    assert rest_keys - lead_keys and lead_keys & rest_keys
    taken = lead.take_rest(rest)
    assert set(taken) == rest_keys - lead_keys
    assert lead.readers.table.row_of(taken[0]) >= 0  # taken as rows, not beside them
    expected = planned_readers([joiner, first], 0, rest_keys - lead_keys)
    expected.update(planned_readers([first], 0, lead_keys))
    for key in lead_keys & rest_keys:  # an earlier part's batch: the rest's readers join it
        expected[key] += planned_readers([joiner], 0, {key})[key]
    assert dict(lead.readers.items()) == expected
    assert {key: lead.readers.table.readers_of(lead.readers.table.row_of(key))
            for key in taken} == {key: expected[key] for key in taken}


class TwoSlots:
    __slots__ = ("a", "b")


def test_a_table_row_holds_its_columns_and_row_only(tmp_path):
    """A batch's row object is two slots (a `ViewRow` subclass held its three unused too: 24
    bytes a batch), frozen, and one a batch."""
    window = plan_window([make_plan(tmp_path, fake_videos(4))], 0)
    row = next(iter(batches(next(iter(window.videos.values())).uses)))
    assert sys.getsizeof(row) == sys.getsizeof(TwoSlots())
    with pytest.raises(AttributeError):
        row.view = None
    assert row == row and row != pickle.loads(pickle.dumps(row))
