"""A window's snapshot (`WindowPlan.snapshot`) is read by pruning in a thread while tasks join
and leave: a task leaving (or resting) after it was taken deletes its batches from the window
only, and the snapshot, its uses included, reads them as planned. Pruning decides the same
whether the task left meanwhile or not, a joiner's lead batches (clips of a row's own, not a
table's range) included."""

from __future__ import annotations

import pytest

from sandfs.plan.window import plan_window
from sandfs.sched.objects import leaf_rows, leaves_nbytes, soonest_clips
from sandfs.sched.pruning import pruned_plans
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, make_plan


def window_of(tmp_path, joiner: bool):
    """Two tasks on the same videos, of two seeds (batches of their own), in a window book;
    `joiner`: the leaving one's batches resolved ahead, as a joining task's lead batches are
    (clips of their own, not a table's range)."""
    videos, plans = fake_videos(30), []
    for name, seed in (("stays", 0), ("leaves", 1)):
        (tmp_path / name).mkdir()
        plans.append(make_plan(tmp_path / name, videos, k_epochs=3, epochs=3, task=name,
                               sampling={"videos_per_batch": 2}, seed=seed))
    if joiner:
        for iteration in range(plans[1].iterations_per_epoch):
            plans[1].resolve_ahead(0, iteration)
    window = plan_window(plans, 0)
    book = WindowBook(plans)
    book.add_window(window)
    return window, book


def decisions(snapshot) -> tuple:
    """What pruning reads and decides of a snapshot: each clip's first reader, its bytes and
    its batch, the soonest clips that fit in half the window, and Algorithm 1 in a third."""
    rows = leaf_rows(snapshot)
    total = leaves_nbytes(snapshot)
    columns = (rows.first, rows.nbytes, rows.view)
    return (rows.paths, list(rows.keys), *(c.tolist() for c in columns),
            [tuple(u.clip) for path in rows.paths for u in snapshot.videos[path].uses],
            dict(soonest_clips(snapshot, total)), dict(pruned_plans(snapshot, total // 3)))


@pytest.mark.parametrize("joiner", [False, True], ids=["planned", "joiner"])
@pytest.mark.parametrize("how", ["remove_task", "rest_task"])
def test_pruning_a_snapshot_decides_the_same_after_a_task_leaves(tmp_path, joiner, how):
    window, book = window_of(tmp_path, joiner)
    loose = dict(window.views.table.columns._loose)
    assert bool(loose) == joiner  # the joiner's batches hold clips of their own
    snapshot = window.snapshot()
    before = decisions(snapshot)
    gone = getattr(book, how)("leaves")  # the event loop, while pruning runs
    assert gone and all(key not in window.readers and key in snapshot.readers for key in gone)
    assert decisions(snapshot) == before
    rows = leaf_rows(snapshot)  # the leaving task's clips are pruning's to decide on
    assert sum(rows.keys[view] in gone for view in rows.view.tolist()) > len(rows.view) // 3
    # its batches read by it, as planned
    assert all({task for task, _ in snapshot.readers[key]} == {"leaves"} for key in gone)
    assert window.views.table.columns._loose.keys() == loose.keys()  # kept as the window


def test_a_view_plan_read_while_its_task_leaves_has_its_clips(tmp_path):
    """A later part of the window plans with `resolved=window.view_plans`: a task leaving
    between its row's check and its clips being read left it a `ViewPlan` with no clips."""
    window, book = window_of(tmp_path, joiner=True)
    table = window.views.table
    key = next(k for k in window.view_plans if table.row_of(k) in table.columns._loose)
    expected = window.view_plans[key]
    columns = table.columns

    class LeavingMeanwhile:
        """The row's columns, its task leaving as its clips are read."""

        def __getattr__(self, name):
            return getattr(columns, name)

        def clips(self, row):
            if "leaves" in book.plans:
                book.remove_task("leaves")
            return columns.clips(row)

    table.columns = LeavingMeanwhile()
    try:
        found = window.view_plans.get(key)
    finally:
        table.columns = columns
    assert "leaves" not in book.plans and key not in window.view_plans
    assert found == expected and tuple(found.clips) == tuple(expected.clips)
