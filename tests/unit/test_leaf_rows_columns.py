"""A window's leaf rows (`sched.objects.leaf_rows`) read from its columns are those a walk of
every use reads (`tests/helpers/leafwalk.py`), and what the soonest clips keep with them is
the same: windows planned whole and in parts, tasks joining and leaving, failed views,
snapshots and a warm store."""

from __future__ import annotations

import pytest

from sandfs.plan.uses import UseColumns
from sandfs.plan.window import plan_window
from sandfs.sched import work
from sandfs.sched.objects import Spot, _leaves_only, _Ranges, leaf_rows, prune_room, soonest_clips
from sandfs.sched.windows import WindowBook
from tests.helpers.leafwalk import walked_leaf_rows
from tests.helpers.plans import PlanStore, fake_videos, make_plan


def assert_same_rows(window) -> None:
    got, want = leaf_rows(window), walked_leaf_rows(window)
    assert got.paths == want.paths and list(got.keys) == list(want.keys)
    for column in ("view", "video", "first", "slot", "nbytes"):
        assert getattr(got, column).tolist() == getattr(want, column).tolist(), column
    assert [list(u) for u in got.uses] == [list(u) for u in want.uses]
    total = want.total
    for share in (1.0, 0.6, 0.25, 0.0):
        room = int(total * share)
        assert _leaves_only(window, got, room) == _leaves_only(window, want, room), share


def tasks(tmp_path, videos: int = 30, names: str = "abc"):
    """Tasks on the same videos: `a` and `b` a search's trials (one seed: shared batches, two
    readers each), the others a seed of their own."""
    listed = fake_videos(videos)
    made = []
    for index, name in enumerate(names):
        (tmp_path / name).mkdir(exist_ok=True)
        made.append(make_plan(tmp_path / name, videos=listed, task=name,
                              seed=1 if name in "ab" else 2 + index,
                              sampling={"videos_per_batch": 3}))
    return made


def test_a_window_planned_whole_and_its_snapshot(tmp_path):
    a, b, c = tasks(tmp_path)
    window = plan_window([a, b, c], 0)
    assert {len(r) for r in window.readers.values()} == {1, 2}
    assert_same_rows(window)
    assert_same_rows(window.snapshot())
    key = next(k for k, r in window.readers.items() if r and r[0][1] > 0)
    window.readers[key] = (*window.readers[key], ("early", 0))  # a reader sooner than its row's
    rows = leaf_rows(window)
    assert set(rows.first[rows.view == rows.keys.index(key)].tolist()) == {0}
    assert_same_rows(window)



def test_the_soonest_clips_keep_ranges_of_the_columns(tmp_path, monkeypatch):
    """Every clip kept: each video's uses a range of the window's use columns, read from
    them, with no video's uses (`UseColumns.group`) made."""
    a, b, c = tasks(tmp_path)
    window = plan_window([a, b, c], 0)
    group, made = UseColumns.group, []
    monkeypatch.setattr(UseColumns, "group", lambda self, g: made.append(g) or group(self, g))
    kept = soonest_clips(window, 1 << 50)
    assert made == [] and isinstance(kept._uses, _Ranges)
    assert len(kept) == len(window.videos)
    for path, video in window.videos.items():
        assert set(kept[path].clips) == {Spot.of(use) for use in video.uses}

def test_a_window_planned_in_parts_with_tasks_joining_and_leaving(tmp_path):
    a, b, c = tasks(tmp_path)
    book = WindowBook([a, c])
    lead = frozenset(a.listed[i].path for i in a.batch_slots(0, 0))
    book.add_window(plan_window([a, c], 0, lead=lead))
    window = book.windows[0]
    assert_same_rows(window)
    book.extend(0, plan_window([a, c], 0, skip=lead, resolved=window.view_plans))
    assert_same_rows(window)
    book.add_task(b)  # a trial of `a`'s seed: a reader more of `a`'s batches
    book.add_reader(0, b)
    assert_same_rows(window)
    (tmp_path / "d").mkdir()
    d = make_plan(tmp_path / "d", videos=a.listed, task="d", seed=9)
    book.add_task(d)
    book.merge(0, plan_window([d], 0))  # new batches, their videos' uses as records
    assert_same_rows(window)
    snapshot = window.snapshot()
    assert book.remove_task("c")  # batches deleted, uses selected
    assert_same_rows(window)
    assert_same_rows(snapshot)  # taken before: its rows read as released
    assert_same_rows(window.snapshot())


def test_failed_views_and_a_warm_store(tmp_path, monkeypatch):
    a, _, c = tasks(tmp_path)
    resolve = type(a).resolve_batches

    def failing(plan, epoch, iterations):
        if plan is a and 1 in iterations:
            raise ValueError("a bug resolving batch 1")
        return resolve(plan, epoch, iterations)

    monkeypatch.setattr(type(a), "resolve_batches", failing)
    window = plan_window([a, c], 0)
    assert window.failed
    assert_same_rows(window)
    whole = plan_window([a, c], 0)
    held = frozenset(work.clip_object_key(u, w.info) for w in whole.videos.values()
                     for u in w.uses[::2])
    planned = work.plan_active_window([a, c], 0, PlanStore(1 << 40, held), "leaves")
    assert_same_rows(planned.plan)
    budget = walked_leaf_rows(planned.plan).total
    assert soonest_clips(planned.plan, budget) == _leaves_only(
        planned.plan, walked_leaf_rows(planned.plan), prune_room(budget))


@pytest.mark.parametrize("seed", range(3))
def test_uses_as_tuples_read_as_the_columns(tmp_path, seed):
    """Videos whose uses are records (tuples) beside column ones: read a use at a time."""
    a, _, c = tasks(tmp_path, videos=20 + seed * 7)
    window = plan_window([a, c], 0)
    for index, video in enumerate(window.videos.values()):
        if index % (seed + 2) == 0:
            video.uses = tuple(video.uses)
    assert_same_rows(window)
