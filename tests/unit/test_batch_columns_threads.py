"""A batch's readers read on a thread (a worker's `use.readers`, pruning, a snapshot) while
the event loop adds rows whose readers are tasks new to the plan key (a later part's, with a
task that joined while the window was in parts): the read never fails and says the readers
as planned."""

from __future__ import annotations

import random
import sys
import threading

from sandfs.plan.batchcolumns import BatchColumns
from sandfs.plan.window import ViewKey

PER = 10**6  # a plan key's batches an epoch: a later part's positions stay apart
ROWS = 4000


def planned(rng: random.Random) -> tuple[BatchColumns, list[tuple]]:
    """Rows of one plan key, each read by a seeded subset of 40 tasks (all of them the first,
    so that their bits are in their names' order); none read yet."""
    columns, expected = BatchColumns(), []
    for iteration in range(ROWS):
        row = columns.append(ViewKey(7, 0, iteration), PER)
        names = [f"t{t}" for t in range(40) if not iteration or rng.random() < 0.3]
        for name in names:
            columns.add_reader(row, name)
        expected.append(tuple((name, iteration) for name in names))
    return columns, expected


def race(columns: BatchColumns) -> tuple[list, list]:
    """Every row read on one thread while another adds rows with a task new to the plan key
    each; what was read, and what the reads raised."""
    errors, read = [], []

    def reader():
        try:
            read.extend(columns.readers_of(row) for row in range(ROWS))
        except Exception as exc:  # the failure this test is about
            errors.append(exc)

    def writer():
        for j in range(ROWS):
            row = columns.append(ViewKey(7, 1, j), PER)
            columns.set_readers(row, ((f"j{j}", PER + j),))

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return read, errors


def test_readers_read_on_a_thread_while_tasks_new_to_the_plan_key_are_added():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as can be
    try:
        for seed in range(3):
            columns, expected = planned(random.Random(seed))
            read, errors = race(columns)
            assert not errors, errors
            assert read == expected
            assert columns.readers_of(ROWS + 5) == (("j5", PER + 5),)
    finally:
        sys.setswitchinterval(interval)
