"""A window's batches as rows (`plan/batchrows.py`): `views`, `readers` and `view_plans` read
as the dicts they replace, built by the walk that built those dicts, and change as a dict
would while tasks join and leave."""

from __future__ import annotations

import random
from array import array

import pytest

from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewPlansMap, ViewsMap
from sandfs.plan.records import ViewPlan
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import ViewKey, WindowPlan, lead_batches, plan_window, slot_owners, view_key
from tests.helpers.plans import fake_videos, make_plan


def walked(plans, window, lead=None) -> tuple[dict, dict]:
    """`views` and `readers` as the window's planning walked them into dicts."""
    views: dict = {}
    readers: dict = {}
    for plan in plans:
        held = None if lead is None else lead_batches(plan, lead)
        for epoch in plan.window_epochs(window):
            for iteration in (range(plan.iterations_per_epoch) if held is None
                              else held(epoch)):
                key = view_key(plan, epoch, iteration)
                readers.setdefault(key, []).append(
                    (plan.name, epoch * plan.iterations_per_epoch + iteration))
                views.setdefault(key, (plan, epoch, iteration))
    return views, {key: tuple(r) for key, r in readers.items()}


def plans_of(tmp_path, seed: int) -> list[TaskPlan]:
    """Three tasks on the same videos: two a search's trials of one seed (the same batches),
    one of another seed."""
    rng = random.Random(seed)
    videos, epochs = fake_videos(rng.randrange(20, 60)), rng.randrange(2, 8)
    sampling = {"videos_per_batch": rng.choice([2, 3, 4])}
    return [make_plan(tmp_path, videos, k_epochs=3, epochs=epochs, sampling=sampling,
                      task=name, seed=task_seed)
            for name, task_seed in (("first", 1), ("shares", 1), ("other", 2))]


@pytest.mark.parametrize("seed", range(4))
def test_the_rows_read_as_the_walked_dicts(tmp_path, seed):
    plans = plans_of(tmp_path, seed)
    for window in range(2):
        if not plans[0].window_epochs(window):
            continue
        lead = None if seed % 2 == 0 else {plans[0].videos[0].path, plans[0].videos[3].path}
        planned = plan_window(plans, window, lead=lead)
        views, readers = walked(plans, window, lead)
        assert views and {len(r) for r in readers.values()} == {1, 2}  # shared and not
        assert list(planned.views.items()) == list(views.items())
        assert list(planned.readers.items()) == list(readers.items())
        assert len(planned.views) == len(views) and len(planned.readers) == len(readers)
        fresh = plans_of(tmp_path, seed)
        by_name = {plan.name: plan for plan in fresh}
        assert list(planned.view_plans) == list(views)
        for key, (plan, epoch, iteration) in planned.views.items():
            assert planned.view_plans[key] == by_name[plan.name].view_plan(epoch, iteration)
        absent = view_key(plans[0], plans[0].window_epochs(window)[0], 10_000)
        assert absent not in planned.views and planned.readers.get(absent) is None


def test_a_row_map_changes_as_a_dict_would(tmp_path):
    """Random sets, deletions and sets again, in the book's ways (a task joining: a key's
    readers set, a new key; a task leaving: keys deleted), against a dict."""
    plans = plans_of(tmp_path, 7)
    planned = plan_window(plans, 0)
    rng = random.Random(11)
    for mapping in (planned.views, planned.readers, planned.view_plans):
        assert isinstance(mapping, ViewsMap | ReadersMap | ViewPlansMap)
        copy, model = mapping.copy(), dict(mapping.items())
        keys = list(model)
        new = [view_key(plans[0], 0, 10_000 + i) for i in range(5)]  # not a row's
        for step in range(400):
            key = rng.choice(keys + new)
            action = rng.random()
            if action < 0.4:
                mapping[key] = model[key] = ("set", step)
            elif action < 0.7:
                if key in model:
                    del mapping[key], model[key]
                else:
                    with pytest.raises(KeyError):
                        del mapping[key]
            else:
                assert mapping.pop(key, None) == model.pop(key, None)
            probe = rng.choice(keys + new)
            assert (probe in mapping) == (probe in model)
            assert mapping.get(probe) == model.get(probe)
            if step % 50 == 0:
                assert list(mapping.items()) == list(model.items())
                assert list(mapping) == list(model) and len(mapping) == len(model)
        assert list(mapping.items()) == list(model.items())
        assert dict(copy.items()) == dict(zip(keys, (v for v in copy.values()), strict=True))


@pytest.mark.parametrize("seed", range(3))
def test_parts_join_their_window_s_table_as_the_window_planned_whole(tmp_path, seed):
    """A window planned in parts, a few videos each (as a daemon plans a large one), then its
    rest: each part's new batches become rows of the first part's table (one table, looked up
    by arithmetic, however many parts); a snapshot sees the rows of when it was taken."""
    plans = plans_of(tmp_path, seed)
    paths = [video.path for video in plans[0].videos]
    random.Random(seed).shuffle(paths)
    held: set = set()
    base = plan_window(plans, 0, lead=set(paths[:2]))
    table = base.views.table
    before = base.snapshot()
    for start in range(2, len(paths) // 2, 3):
        part = set(paths[start:start + 3])
        later = plan_window(plans_of(tmp_path, seed), 0, lead=part, skip=held,
                            resolved=base.view_plans)
        base.take_rest(later)
        held |= part
    rest = plan_window(plans_of(tmp_path, seed), 0, skip=held | set(paths[:2]),
                       resolved=base.view_plans)
    assert base.take_rest(rest)
    whole = plan_window(plans_of(tmp_path, seed), 0)
    assert all(m.table is table for m in (base.views, base.readers, base.view_plans))
    assert len(table) == len(whole.views)  # a row a batch, none twice
    assert dict(base.readers.items()) == dict(whole.readers.items())
    assert {k: (p.name, e, i) for k, (p, e, i) in base.views.items()} == {
        k: (p.name, e, i) for k, (p, e, i) in whole.views.items()}
    assert dict(base.view_plans.items()) == dict(whole.view_plans.items())
    assert set(before.views) == set(walked(plans, 0, set(paths[:2]))[0]) < set(base.views)
    dicts = WindowPlan(0, {}, dict(base.views.items()), dict(base.readers.items()))
    assert dicts.take_rest(rest) == []  # dicts take a rest too, a key at a time


def walked_uses(planned: WindowPlan, lead=None, skip=frozenset()) -> dict:
    """Each video's (info, plan, uses) as the window's planning walked its clips one by one."""
    videos: dict = {}
    for key, (plan, _, _) in planned.views.items():
        view = planned.view_plans[key]
        owners = slot_owners(plan, view) if lead is not None or skip else None
        for slot, clip in enumerate(view.clips):
            info = plan.videos[clip.video_index]
            owner = info.path if owners is None else owners[slot]
            if owner in skip or (lead is not None and owner not in lead):
                continue
            videos.setdefault(info.path, (info, plan, []))[2].append((key, slot, clip))
    return videos


@pytest.mark.parametrize("seed", range(6))
def test_uses_grouped_in_numpy_are_the_clip_walk_s(tmp_path, seed):
    plans = plans_of(tmp_path, seed)
    rng = random.Random(seed)
    paths = [video.path for video in plans[0].videos]
    part = set(rng.sample(paths, rng.randrange(1, 6)))
    for lead, skip in ((None, frozenset()), (part, frozenset()), (None, frozenset(part))):
        planned = plan_window(plans, 0, lead=lead, skip=skip)
        walked_videos = walked_uses(planned, lead, skip)
        assert walked_videos and list(planned.videos) == list(walked_videos)
        for path, (info, plan, uses) in walked_videos.items():
            work = planned.videos[path]
            assert work.info == info and work.plan is plan and work.window == 0
            assert [(u.view, u.slot, u.clip) for u in work.uses] == uses


def test_a_row_is_whole_before_its_key_finds_it(tmp_path):
    """Planning threads read a window's mappings while the event loop adds its rest's rows:
    a key found has all its columns (an IndexError in between before), readers included."""
    plan = plans_of(tmp_path, 1)[0]
    table, seen = BatchRows(), []

    key = view_key(plan, 0, 0)

    class Watching(array):
        def append(self, value):
            seen.append(table.row_of(key))  # what a reader in between finds
            super().append(value)

    table._profile = Watching("H")  # the last column written
    row = table.add(key, plan, (("first", 0),))
    assert seen == [-1] and table.row_of(key) == row == 0
    assert table.readers_of(row) == (("first", 0),) and table.plan(row) is plan
    assert table.key(row) == key and table.place(row) == (plan, 0, 0)


def test_a_key_deleted_while_a_thread_reads_it_is_no_key_error(tmp_path):
    """`get` looked a key up in the overlay twice: a task leaving in between (the event loop)
    left a planning thread a KeyError."""
    plans = plans_of(tmp_path, 2)
    readers = plan_window(plans, 0).readers
    key = view_key(plans[0], 0, 10_000)  # not a row's: kept beside the rows

    class LeavingMeanwhile(dict):
        def __contains__(self, item):
            found = super().__contains__(item)
            self.pop(item, None)
            return found

    readers[key] = (("joined", 1),)
    readers._extra = LeavingMeanwhile(readers._extra)
    assert readers.get(key, "gone") in ((("joined", 1),), "gone")


def test_a_batch_deleted_stays_as_planned_for_a_copy_taken_before(tmp_path):
    """A task leaving deletes its batches from the window's mappings only: a copy taken before
    (pruning's snapshot) and their rows (the uses planned before) read them as planned."""
    plans = plans_of(tmp_path, 3)
    planned = plan_window(plans, 0)
    table, before = planned.views.table, planned.snapshot()
    keys = list(planned.views)[:5]
    then = {key: (planned.readers[key], planned.view_plans[key]) for key in keys}
    for key in keys:
        del planned.views[key], planned.readers[key]
        planned.view_plans.pop(key)
    assert all(planned.readers.get(key) is None and key not in planned.view_plans
               for key in keys)
    assert {key: (before.readers[key], before.view_plans[key]) for key in keys} == then
    rows = [table.row_of(key) for key in keys]
    assert all(table.columns.view_row(row).readers == table.readers_of(row) == then[key][0] != ()
               for row, key in zip(rows, keys, strict=True))
    kept = next(iter(planned.views))
    assert planned.view_plans[kept] == before.view_plans[kept] is not None


class OddPlan:
    """What `BatchRows` asks of a task plan: one window of 2 epochs of 50 batches."""

    k_epochs, iterations_per_epoch = 2, 50

    def window_of(self, epoch: int) -> int:
        return 0

    def window_epochs(self, window: int) -> range:
        return range(2)


def test_a_deleted_row_keeps_its_readers_tuple_and_own_clips():
    """Rows whose readers the bits cannot say (70 tasks) and whose clips are their own (not a
    table's range, a joining task's lead batches) hold tuples beside the columns: deleted
    from the mappings, a copy taken before and their rows still read them as planned (freed
    then, pruning's snapshot read None for their clips)."""
    plan, table = OddPlan(), BatchRows()
    readers, plans = ReadersMap(table), ViewPlansMap(table)
    keys = [ViewKey("k", epoch, iteration) for epoch in range(2) for iteration in range(50)]
    for key in keys:
        position = key.epoch * 50 + key.iteration
        row = table.add(key, plan, tuple((f"task{t}", position) for t in range(70)))
        clips = tuple(f"clip {position}.{slot}" for slot in range(8))
        table.resolved(row, ViewPlan("t", key.epoch, key.iteration, clips, (8,), "uint8", "x"))
    then = dict(readers.items()), dict(plans.items())
    copies = readers.copy(), plans.copy()
    for key in keys:
        del readers[key], plans[key]
    assert not readers and not plans
    assert (dict(copies[0].items()), dict(copies[1].items())) == then
    for key in keys:
        row = table.row_of(key)
        assert table.columns.view_row(row).readers == then[0][key] and len(then[0][key]) == 70
        assert table.columns.view_row(row).clips == then[1][key].clips == table.columns.clips(row)


class ManyPlaces(OddPlan):
    """A plan key of 5 epochs of 31,250 batches (250,000 videos, 8 a batch)."""

    k_epochs, iterations_per_epoch = 5, 31_250

    def window_epochs(self, window: int) -> range:
        return range(5)


def test_a_part_s_rows_are_found_in_bytes_of_its_rows_not_of_the_window_s_places():
    """A window planned in parts has a table a part, each with a few hundred of the plan key's
    156,250 places: an index of every place was 625 KB a part, 320 MB over window 0's 512
    parts at 250,000 videos. The index grows with the rows, and reads the same once dense."""
    import tracemalloc

    plan, rng = ManyPlaces(), random.Random(5)
    places = rng.sample(range(5 * 31_250), 6_000)
    tracemalloc.start()
    table = BatchRows()
    for place in places[:300]:
        table.add(ViewKey("k", *divmod(place, 31_250)), plan)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held < 150_000  # bytes: the part's 300 rows, not 156,250 places of 4
    for place in places[300:]:  # past a 32nd of the places: an array of them
        table.add(ViewKey("k", *divmod(place, 31_250)), plan)
    assert [table.row_of(ViewKey("k", *divmod(p, 31_250))) for p in places] == list(
        range(len(places)))
    absent = next(p for p in range(5 * 31_250) if p not in set(places))
    assert table.row_of(ViewKey("k", *divmod(absent, 31_250))) == -1
    assert table.row_of(ViewKey("k", 5, 0)) == table.row_of(ViewKey("k", 0, 31_250)) == -1
