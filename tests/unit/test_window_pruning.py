"""What a window keeps on disk (`sched.pruning`) is what Algorithm 1 over the window's object
graphs (`cache.prune.prune` over `objects.object_graph`, the implementation it replaces) keeps,
on planned windows: one task, tasks whose clips share frames enough to collapse, and clips
that repeat a frame (a video shorter than a clip's span)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import numpy as np
import pytest

from sandfs.cache.prune import prune
from sandfs.plan.window import plan_window
from sandfs.sched import pruning
from sandfs.sched.objects import (
    PRUNE_TARGET_FRACTION,
    DiskPlan,
    KeptClips,
    KeptWindow,
    Spot,
    clip_nbytes,
    first_reader,
    kept_window,
    leaves_nbytes,
    object_graph,
    soonest_clips,
)
from sandfs.sched.pruning import pruned_plans, window_pruned
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, make_plan


def reference(window, room: int) -> dict[str, DiskPlan]:
    """`prune` over each video's graph; a video that keeps nothing has no plan."""
    paths = list(window.videos)
    chosen = prune([object_graph(window.videos[p], window) for p in paths], room)
    plans = {path: DiskPlan({Spot(n[1], n[2]) for n in cached if n[0] == "clip"},
                            any(n[0] == "frame" for n in cached))
             for path, cached in zip(paths, chosen.cached, strict=True)}
    return {path: plan for path, plan in plans.items() if plan.clips or plan.frames}


def leaves_reference(window, room: int) -> dict[str, DiskPlan]:
    """The soonest clips that fit, a clip at a time: sorted by (first reader, path, slot)."""
    uses = sorted(((first_reader(u), path, u) for path, work in window.videos.items()
                   for u in work.uses), key=lambda item: (item[0], item[1], item[2].slot))
    kept: dict[str, set[Spot]] = {}
    for _, path, use in uses:
        nbytes = clip_nbytes(window.views[use.view][0], use)
        if nbytes > room:
            break
        room -= nbytes
        kept.setdefault(path, set()).add(Spot.of(use))
    return {path: DiskPlan(spots) for path, spots in kept.items()}


def windows(tmp_path):
    for folder in ("one", "dense0", "dense1", "short"):
        (tmp_path / folder).mkdir()
    one = make_plan(tmp_path / "one", videos=fake_videos(30))
    repeating = make_plan(tmp_path / "short", videos=fake_videos(9, num_frames=5),
                          sampling={"frames_per_video": 6})  # clips repeat their last frame
    short = fake_videos(12, num_frames=14)  # many clips on few frames: collapses save
    dense = [make_plan(tmp_path / f"dense{i}", videos=short, task=f"t{i}", seed=i,
                       sampling={"samples_per_video": 3, "frames_per_video": 6})
             for i in range(2)]
    return [plan_window([one], 0), plan_window(dense, 0), plan_window([repeating], 0)]


@pytest.mark.parametrize("share", [1.0, 0.8, 0.5, 0.2, 0.0])
def test_keeps_what_the_general_walk_keeps(tmp_path, share):
    for index, window in enumerate(windows(tmp_path)):
        room = int(leaves_nbytes(window) * share)
        assert pruned_plans(window, room) == reference(window, room), (index, share)


@pytest.mark.parametrize("share", [1.0, 0.8, 0.5, 0.2, 0.0])
def test_the_soonest_clips_are_those_of_a_clip_at_a_time_walk(tmp_path, share):
    """Ranked in numpy over the window's columns (`leaf_rows`): the same clips, and no plan
    for a video that keeps none."""
    for index, window in enumerate(windows(tmp_path)):
        room = int(leaves_nbytes(window) * share)
        kept = soonest_clips(window, int(room / PRUNE_TARGET_FRACTION) + 1)
        assert kept == leaves_reference(window, room), (index, share)
        assert all(plan.clips for plan in kept.values())


def _crop(size: int) -> list[dict]:
    return [{"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
             "config": [{"resize": {"shape": [36, 48]}}]},
            {"name": "crop", "branch_type": "single", "inputs": ["r"], "outputs": ["c"],
             "config": [{"random_crop": {"size": [size, size]}}]}]


def random_window(tmp_path, trial: int):
    """A random window of 1-3 tasks over the same videos (shared or own views, clips of
    several sizes)."""
    rng = random.Random(trial)
    videos = fake_videos(rng.randint(3, 25), num_frames=rng.choice([14, 40, 120]))
    plans = []
    for t in range(rng.randint(1, 3)):
        (tmp_path / f"t{t}").mkdir()
        sampling = {"samples_per_video": rng.randint(1, 3), "frames_per_video":
                    rng.choice([2, 4, 6]), "videos_per_batch": rng.choice([2, 4])}
        extra = {"augmentation": _crop(rng.choice([16, 32]))} if rng.random() < 0.5 else {}
        plans.append(make_plan(tmp_path / f"t{t}", videos=videos, task=f"t{t}",
                               seed=rng.choice([0, 0, 1]), sampling=sampling, **extra))
    return plan_window(plans, 0)


@pytest.mark.parametrize("trial", range(6))
def test_the_soonest_clips_match_at_every_boundary(tmp_path, trial):
    """Random windows, at rooms on every side of the clip-at-a-time walk's boundaries: ties
    and off-by-one budgets."""
    window = random_window(tmp_path, trial)
    uses = sorted(((first_reader(u), p, u) for p, w in window.videos.items() for u in w.uses),
                  key=lambda item: (item[0], item[1], item[2].slot))
    ends = list(itertools.accumulate(clip_nbytes(window.views[u.view][0], u)
                                     for _, _, u in uses))
    total = leaves_nbytes(window)
    for room in sorted({0, total, total + 1} | {e + d for e in ends for d in (-1, 0, 1)}):
        budget = int(room / PRUNE_TARGET_FRACTION) + 1
        assert soonest_clips(window, budget) == leaves_reference(window, room), room


@pytest.mark.parametrize("trial", range(8))
def test_random_windows_keep_what_the_general_walk_keeps(tmp_path, trial):
    """Random windows of 1-3 tasks sharing frames, at several budgets."""
    window = random_window(tmp_path, trial)
    total = leaves_nbytes(window)
    for share in (0.9, 0.6, 0.35, 0.1):
        room = int(total * share)
        assert pruned_plans(window, room) == reference(window, room), share


def _read_rows(rows):
    """Each use's (video, source, frame bytes, clip bytes, frame indices)."""
    starts = np.concatenate(([0], np.cumsum(rows.lengths))).tolist()
    return [(int(rows.video[i]), rows.sources[rows.source[i]], int(rows.frame_nbytes[i]),
             int(rows.out_nbytes[i]), rows.indices[starts[i]:starts[i + 1]].tolist())
            for i in range(len(rows.video))]


@pytest.mark.parametrize("trial", range(5))
def test_the_table_columns_are_the_uses_read_one_at_a_time(tmp_path, trial):
    """`table_rows` (the clip tables by index, in numpy) reads what `use_rows` (`frame_rows`,
    a use at a time) reads, on planned windows; and uses that are not columns (a tuple) give
    the same disk plans."""
    (tmp_path / "w").mkdir()
    planned = [random_window(tmp_path / "w", trial)] + (windows(tmp_path) if trial == 0 else [])
    for window in planned:
        works = [window.videos[path] for path in window.videos]
        by_index = pruning.table_rows(window, works)
        one_at_a_time = pruning.use_rows(window, works)
        assert by_index is not None and _read_rows(by_index) == _read_rows(one_at_a_time)
        infos = [work.info for work in works]
        graphs = [pruning.flat_graphs(rows, infos) for rows in (by_index, one_at_a_time)]
        for name in type(graphs[0]).__slots__:
            assert np.array_equal(*(getattr(g, name) for g in graphs)), name
        room = leaves_nbytes(window) // 3
        kept = pruned_plans(window, room)
        for work in works:
            work.uses = tuple(work.uses)
        assert pruned_plans(window, room) == kept == reference(window, room)


def test_a_window_planned_in_parts_whole(tmp_path):
    """A lead part and its rest, joined in the window book: the clips of two tables, read
    by index, keep what `prune` keeps."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    videos = fake_videos(30, num_frames=40)
    plans = [make_plan(tmp_path / name, videos=videos, task=name, seed=seed,
                       sampling={"samples_per_video": 2, "frames_per_video": 4})
             for name, seed in (("a", 0), ("b", 0))]
    lead = frozenset(plans[0].listed[i].path for i in plans[0].batch_slots(0, 0))
    part = plan_window(plans, 0, lead=lead)
    rest = plan_window(plans, 0, skip=lead, resolved=part.view_plans)
    book = WindowBook(plans)
    book.add_window(part)
    book.extend(0, rest)
    window = book.windows[0]
    works = [window.videos[path] for path in window.videos]
    rows = pruning.table_rows(window, works)
    assert rows is not None and _read_rows(rows) == _read_rows(pruning.use_rows(window, works))
    for share in (0.7, 0.3):
        room = int(leaves_nbytes(window) * share)
        assert pruned_plans(window, room) == reference(window, room), share


def test_a_task_leaving_while_a_window_is_snapshot_for_pruning(tmp_path):
    """The snapshot copies views first and readers last: a task leaving between them leaves a
    view without readers, which the columns read (a KeyError skipped pruning the window)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    videos = fake_videos(12)
    a = make_plan(tmp_path / "a", videos=videos, task="a")
    b = make_plan(tmp_path / "b", videos=videos, task="b", seed=7)
    book = WindowBook([a, b])
    window = plan_window([a, b], 0)
    book.add_window(window)

    class LeavingMeanwhile(dict):
        def items(self):
            if book.plans.get("b") is not None:
                book.remove_task("b")
            return super().items()

    window.videos = LeavingMeanwhile(window.videos)
    assert isinstance(window_pruned(window, 1, "algorithm1"), KeptWindow)


def test_the_dense_window_collapses(tmp_path):
    window = windows(tmp_path)[1]
    room = int(leaves_nbytes(window) * 0.5)
    assert any(plan.frames for plan in pruned_plans(window, room).values())


def test_the_columns_cost_model_is_object_graph_s(tmp_path):
    """Decode seconds a frame (frames a pass decodes, as `frames_to_decode` counts them: runs
    from keyframes, none for a video that cannot seek) and a clip's op seconds, exactly."""
    videos = fake_videos(12, num_frames=60)
    videos = [replace(v, seekable=False) if i % 4 == 1 else
              replace(v, keyframe_indices=()) if i % 4 == 2 else
              replace(v, keyframe_indices=(0, 7, 30, 31)) if i % 4 == 3 else v
              for i, v in enumerate(videos)]
    (tmp_path / "t").mkdir()
    window = plan_window([make_plan(tmp_path / "t", videos=videos, k_epochs=3,
                                    sampling={"samples_per_video": 2})], 0)
    paths = list(window.videos)
    works = [window.videos[path] for path in paths]
    graphs = pruning.flat_graphs(pruning.table_rows(window, works), [w.info for w in works])
    for index, path in enumerate(paths):
        graph = object_graph(window.videos[path], window)
        clips = np.flatnonzero(graphs.clip_video == index)
        assert graphs.frame_seconds[index] == graph.make_seconds[1]
        assert graphs.clip_seconds[clips].tolist() == [
            s for s, parents in zip(graph.make_seconds, graph.parents, strict=True)
            if parents and parents != (0,)]


@pytest.mark.parametrize("dense", [1, 7, 64, 1 << 22])
def test_frames_are_numbered_as_np_unique_numbers_them(monkeypatch, dense):
    """Blocks of videos numbered by marks (`_numbered`), a video wider than a block by
    `np.unique`: the numbers `np.unique` gives, on keys that come video by video."""
    monkeypatch.setattr(pruning, "_DENSE", dense)
    rng = np.random.default_rng(dense)
    width = 5
    video = np.sort(rng.integers(0, 40, 300))
    key = video * width + rng.integers(0, width, 300)
    distinct, numbers = pruning._numbered(key, width)
    expected = np.unique(key, return_inverse=True)
    assert np.array_equal(distinct, expected[0]) and np.array_equal(numbers, expected[1])


def test_kept_clips_are_bits_over_the_video_s_uses_as_many_as_it_has(tmp_path):
    """A window keeps a bit a use, not a `Spot` a clip, and a row a video that keeps anything,
    found by its path; a video with more uses in the window than a machine word holds keeps
    them all."""
    (tmp_path / "wide").mkdir()
    window = plan_window([make_plan(tmp_path / "wide", videos=fake_videos(3), epochs=20,
                                    k_epochs=20, sampling={"samples_per_video": 4})], 0)
    paths = list(window.videos)
    uses = [window.videos[path].uses for path in paths]
    assert len(uses[2]) > 64
    rng = random.Random(3)
    within = np.array(sorted([*rng.sample(range(len(uses[2]) - 1), 20), len(uses[2]) - 1]))
    kept = kept_window(paths, uses, np.full(len(within), 2), within,
                       np.array([False, True, False]))
    spots = {Spot.of(uses[2][i]) for i in within.tolist()}
    assert kept == {paths[1]: DiskPlan(frames=True), paths[2]: DiskPlan(spots)}
    plan = kept[paths[2]]
    assert set(plan.clips) == spots and len(plan.clips) == 21 and "spot" not in plan.clips
    assert sum(Spot.of(u) in plan.clips for u in uses[2]) == 21
    assert kept.framed() == [paths[1]] and paths[0] not in kept
    with pytest.raises(ValueError, match="marks uses past"):
        KeptClips(uses[2][:2], 0b100)
