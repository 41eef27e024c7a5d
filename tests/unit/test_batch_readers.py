"""A batch's readers derived from its plan key's tasks and its place (`BatchRows.readers_of`),
with a tuple only where the bits cannot say them, read through `ReadersMap` as the dict of
tuples it replaces while tasks join, leave and snapshots are taken: a seeded random walk
against that dict."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from sandfs.plan.batchcolumns import TableRow
from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewsMap
from sandfs.plan.uses import ViewRow, batches
from sandfs.plan.window import ViewKey, plan_window
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


@pytest.mark.parametrize("seed", range(6))
def test_readers_read_as_the_dict_of_tuples_they_replace(seed):
    rng = random.Random(seed)
    plan = FakePlan("p")
    table, reference = planned(rng, plan, rng.choice([1, 3, 70]))  # 70: past a row's bits
    readers, views = ReadersMap(table), ViewsMap(table)
    assert [table.readers_of(table.row_of(k)) for k in reference] == list(reference.values())
    assert list(readers.items()) == list(reference.items())
    snapshots = []
    for _ in range(200):
        keys = list(reference)
        action = rng.random()
        if action < 0.3 and keys:  # a task joins a batch
            key = rng.choice(keys)
            more = ((f"j{rng.randrange(3)}", key.epoch * 5 + key.iteration),)
            readers[key] = reference[key] = reference[key] + more
        elif action < 0.55 and keys:  # a task leaves: its batches lose it, or go
            name = rng.choice(sorted({t for r in reference.values() for t, _ in r} or {"x"}))
            for key in keys:
                left = tuple(r for r in reference[key] if r[0] != name)
                if left:
                    if len(left) < len(reference[key]):
                        readers[key] = reference[key] = left
                else:
                    del readers[key], reference[key]
        elif action < 0.7:  # a batch set anew, a row's once deleted or none's
            key = ViewKey(rng.choice("abcz"), rng.randrange(3), rng.randrange(5))
            readers[key] = reference[key] = (("n", 1),)
        elif action < 0.8:
            snapshots.append((readers.copy(), dict(reference)))
        assert list(readers.items()) == list(reference.items())
        assert len(readers) == len(reference)
        assert all(readers.get(key) == value for key, value in reference.items())
    for copied, then in snapshots:  # a copy: its own overlay; a row released since reads ()
        assert set(copied) == set(then)
        assert all(copied[key] in (value, ()) for key, value in then.items())
    assert len(views) == len(table)  # views untouched: every row


def test_a_table_row_reads_its_batch_and_is_sent_as_the_view_row_it_stands_for(tmp_path):
    """A window's `ViewRow`s are its rows' (`TableRow`): their fields as planned, one a
    batch shared by its videos' uses; pickled (a worker process) or copied as a `ViewRow`."""
    plan = make_plan(tmp_path, fake_videos(9), k_epochs=2, epochs=2)
    window = plan_window([plan], 0)
    rows = {id(row): row for work in window.videos.values() for row in batches(work.uses)}
    assert len(rows) == len(window.view_plans)  # one a batch, shared by its videos' uses
    for row in rows.values():
        assert type(row) is TableRow
        assert row.readers == window.readers[row.view]
        assert tuple(row.clips) == tuple(window.view_plans[row.view].clips)
        for sent in (pickle.loads(pickle.dumps(row)), copy.copy(row)):
            assert type(sent) is ViewRow and sent.view == row.view
            assert sent.readers == row.readers and tuple(sent.clips) == tuple(row.clips)
