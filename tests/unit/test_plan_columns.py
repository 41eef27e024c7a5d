"""A task epoch's batches resolved at once into a table's columns (`sandfs/plan/columns.py`)
are the clips resolving them one by one gives: over seeded random configs (crops up to the
frame's size and past it, coins, a drawn-alone op, several streams, decode_resize, shards,
short videos), paths that are not plain, a bad video's stand-in, and a batch that fails."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from sandfs import ops as oplib
from sandfs.config.loader import load_task_config
from sandfs.config.schema import OpSpec
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, DatasetScan, ListedVideo
from sandfs.plan import columns
from sandfs.plan.clipdraws import ClipDraws
from sandfs.plan.cliptable import TableClips
from sandfs.plan.draws import FirstOutput, NeedGenerator, digest_words, pcg64_first
from sandfs.plan.mount import plan_tasks
from sandfs.plan.probed import NoUsableVideo
from sandfs.plan.staticpath import RandomOp
from sandfs.plan.task import TaskPlan
from sandfs.plan.usegroups import UseGroups
from sandfs.plan.window import plan_window, view_key
from tests.helpers.harness import task_config
from tests.helpers.plans import FAKE_DATASET, fake_videos


def _single(name: str, source: str, output: str, ops: list) -> dict:
    return {"name": name, "branch_type": "single", "inputs": [source], "outputs": [output],
            "config": ops}


def _random_config(seed: int) -> dict:
    """A plain pipeline (no drawn or conditional branch, no temporal op) and sampling."""
    rng = np.random.default_rng(seed)
    crop = int(rng.choice([8, 24, 40, 48]))  # 48: the fake videos' height, or past it
    steps, source = [], "frame"
    if rng.random() < 0.6:
        shape = [int(rng.integers(crop, crop + 20)), int(rng.integers(crop, crop + 30))]
        steps.append(_single("resize", "frame", "resized", [{"resize": {"shape": shape}}]))
        source = "resized"
    ops = [{"random_crop": {"size": [crop, crop]}},
           {"flip": {"direction": "horizontal", "p": float(rng.choice([0.25, 0.5, 1.0]))}}]
    if rng.random() < 0.5:
        ops.append({"grayscale": {"p": 0.3}})
    if rng.random() < 0.3:  # drawn from uniform draws: one clip at a time
        ops.insert(0, {"random_resized_crop": {"size": [crop + 8, crop + 8]}})
    if rng.random() < 0.4:  # two streams
        other = [{"resize": {"shape": [crop + 4, crop + 6]}},
                 {"random_crop": {"size": [crop, crop]}}]
        steps += [{"name": "two", "branch_type": "multi", "inputs": [source],
                   "outputs": ["a", "b"], "branches": [{"config": ops}, {"config": other}]},
                  {"name": "join", "branch_type": "merge", "inputs": ["a", "b"],
                   "outputs": ["out"]}]
    else:
        steps.append(_single("aug", source, "out", ops))
    sampling = {"videos_per_batch": int(rng.integers(1, 6)),
                "frames_per_video": int(rng.integers(1, 7)),
                "frame_stride": int(rng.integers(1, 4)),
                "samples_per_video": int(rng.integers(1, 4)),
                "drop_last": bool(rng.random() < 0.3),
                "short_video": str(rng.choice(["repeat_last", "wrap"]))}
    if rng.random() < 0.3:
        sampling["frames_per_video"] = 40  # longer than some videos
    if rng.random() < 0.3:
        sampling["decode_resize"] = {"shape": [int(rng.integers(crop, 90)), 60]}
    if rng.random() < 0.3:
        sampling["shard"] = {"world_size": 2, "rank": int(rng.integers(0, 2))}
    return task_config(FAKE_DATASET, seed=seed, epochs=4, sampling=sampling,
                       augmentation=steps)


def _videos(count: int, seed: int) -> list:
    """Videos of several lengths and sizes, some shorter than a clip."""
    rng = np.random.default_rng(seed)
    return [dataclasses.replace(v, num_frames=int(n), frame_pts=tuple(range(int(n))),
                                width=int(w), height=int(h))
            for v, n, w, h in zip(fake_videos(count), rng.integers(3, 200, count),
                                  rng.choice([40, 64, 200], count),
                                  rng.choice([30, 48, 150], count), strict=True)]


def _plans(config: dict, videos: list, tasks: int = 1) -> list[TaskPlan]:
    configs = [load_task_config(Path("t.yaml"), text=yaml.safe_dump(
        config | {"task": f"t{i}", "seed": config["seed"] + i}), check_paths=False)
        for i in range(tasks)]
    scans = {(configs[0].dataset.video_dataset_path, configs[0].dataset.extensions):
             DatasetScan(str(FAKE_DATASET), tuple(videos), ())}
    return plan_tasks(configs, scans, k_epochs=2)


def _walked(plans: list[TaskPlan]) -> list[TaskPlan]:
    """The plans resolving every clip by walking its path."""
    for plan in plans:
        plan.static_paths = [None] * len(plan.paths)
    return plans


def _values(view) -> list[tuple]:
    return [(c.video_index, c.sample, c.stream, tuple(c.frame_indices), c.ops, c.path)
            for c in view.clips]


def _assert_batches_as_walked(fast: TaskPlan, slow: TaskPlan) -> None:
    for epoch in range(fast.epochs):
        iterations = list(range(fast.iterations_per_epoch))
        found = fast.resolve_batches(epoch, iterations)
        tables = {id(view.clips.table) for view in found}
        assert len(tables) == 1 and all(isinstance(v.clips, TableClips) for v in found)
        for iteration, view in zip(iterations, found, strict=True):
            walked = slow.view_plan(epoch, iteration)
            assert _values(view) == _values(walked), (epoch, iteration)
            assert (view.shape, view.dtype, view.layout) == (walked.shape, walked.dtype,
                                                             walked.layout)


@pytest.mark.parametrize("seed", range(16))
def test_columns_resolve_the_clips_the_walk_resolves(seed):
    config, videos = _random_config(seed), _videos(23, seed)
    tasks = 2 if seed % 4 == 3 else 1  # two tasks: crops in a shared window, drawn one by one
    fast, slow = _plans(config, videos, tasks), _walked(_plans(config, videos, tasks))
    for plan, walked in zip(fast, slow, strict=True):
        assert all(plan.static_paths)
        _assert_batches_as_walked(plan, walked)


NOT_PLAIN = {
    "drawn_branch": {},  # the harness's pipeline draws a branch
    "temporal": {"augmentation": [_single("rev", "frame", "out", [
        {"inv_sample": True}, {"random_crop": {"size": [32, 32]}}])]},
    "test_views": {"sampling": {"samples_per_video": None,
                                "test_views": {"clips": 2, "crops": 3}},
                   "augmentation": [_single("crop", "frame", "out",
                                            [{"random_crop": {"size": [32, 32]}}])]},
}


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_paths_that_are_not_plain_resolve_batches_clip_by_clip(name):
    config = task_config(FAKE_DATASET, **NOT_PLAIN[name])
    plan, = _plans(config, _videos(11, 5))
    assert not all(plan.static_paths)
    _assert_batches_as_walked(plan, _plans(config, _videos(11, 5))[0])


def test_a_bad_videos_slots_hold_its_stand_ins_clips():
    infos = _videos(9, 3)
    listed = [ListedVideo(v.name, v.rel_path, v.path, 1, 1) for v in infos]
    plans = []
    for _ in range(2):
        book = ProbeBook(listed, threading.Event())
        for info in infos:
            book.record(info.rel_path, BadVideo(info.rel_path, "open_invalid", "no")
                        if info.name == infos[4].name else info)
        config = load_task_config(Path("t.yaml"), text=yaml.safe_dump(_random_config(2)),
                                  check_paths=False)
        plans.append(TaskPlan(config, listed, k_epochs=2, probes=book))
    fast, slow = plans[0], _walked(plans[1:])[0]
    _assert_batches_as_walked(fast, slow)
    held = {c.video_index for i in range(fast.iterations_per_epoch)
            for c in fast.view_plan(0, i).clips}
    assert 4 not in held and 5 in held  # the next usable one by name stands in


def test_a_batch_that_fails_fails_alone(monkeypatch):
    plan, = _plans(_random_config(1), _videos(23, 1))
    whole = plan.resolve_batches(0, range(plan.iterations_per_epoch))
    found = plan.batch_videos

    def batch_videos(epoch, iteration):
        if iteration == 2:
            raise NoUsableVideo("none usable")
        return found(epoch, iteration)

    monkeypatch.setattr(plan, "batch_videos", batch_videos)
    again = plan.resolve_batches(0, range(plan.iterations_per_epoch))
    assert isinstance(again[2], NoUsableVideo)
    assert [_values(v) for i, v in enumerate(again) if i != 2] == [
        _values(v) for i, v in enumerate(whole) if i != 2]


def test_a_window_resolves_each_batch_alone_when_resolving_them_together_fails(monkeypatch):
    config, videos = _random_config(6), _videos(23, 6)
    expected = plan_window(_plans(config, videos), 0)
    plain_views = columns._plain_views

    def failing(plan, epoch, iterations, batch_videos):
        if len(iterations) > 1:
            raise MemoryError("together")
        return plain_views(plan, epoch, iterations, batch_videos)

    monkeypatch.setattr(columns, "_plain_views", failing)
    planned = plan_window(_plans(config, videos), 0)
    assert not planned.failed and planned.views.keys() == expected.views.keys()
    assert all(_values(planned.view_plans[key]) == _values(view)
               for key, view in expected.view_plans.items())


OUTPUTS = pcg64_first(digest_words([repr(("draw", i)) for i in range(4000)]))


@pytest.mark.parametrize(("spec", "in_hw"), [
    (OpSpec("random_crop", (("size", (32, 32)),)), (48, 64)),
    (OpSpec("random_crop", (("size", (48, 20)),)), (48, 64)),  # no room down: x from the low half
    (OpSpec("random_crop", (("size", (48, 64)),)), (48, 64)),  # draws nothing
    (OpSpec("random_crop", (("size", (100, 30)),)), (48, 64)),  # past the frame: upscaled
    (OpSpec("random_crop", (("size", (8, 8)),)), (3 << 30, 64)),  # a quarter drawn again
    (OpSpec("flip", (("direction", "horizontal"), ("p", 0.3))), (48, 64)),
    (OpSpec("flip", (("direction", "horizontal"), ("p", 1.0))), (48, 64)),
])
def test_drawn_codes_are_the_ops_draws(spec, in_hw):
    """Equal codes for equal draws, and NeedGenerator where numpy would draw again."""
    random = RandomOp(0, spec, in_hw, None, ((), 0))
    codes, need, count = columns.drawn_codes(random, OUTPUTS)
    op, by_code = oplib.get_op(spec.name), {}
    for code, needed, output in zip(codes.tolist(), need.tolist(), OUTPUTS.tolist(),
                                    strict=True):
        try:
            drawn = op.draw(dict(spec.params), FirstOutput(output), in_hw)
        except NeedGenerator:
            assert needed
            continue
        assert not needed and 0 <= code < count
        assert by_code.setdefault(code, drawn) == drawn
    assert len(set(map(repr, by_code.values()))) == len(by_code)


def test_a_stand_in_not_found_fails_the_batches_holding_its_slot_alone(monkeypatch):
    """Found while the window's batches are drawn (their slots read at once), then again as
    the batch is resolved, where it fails with its reason."""
    config, videos = _random_config(9), _videos(23, 9)
    expected = plan_window(_plans(config, videos), 0)
    plan, = plans = _plans(config, videos)
    stand_in, usable_mask = plan.stand_ins.of, plan.videos.usable_mask

    def failing(index):
        if index == 7:
            raise NoUsableVideo("slot 7 has none")
        return stand_in(index)

    def lost(indices):  # read with the others, it fails them all: each is asked alone
        if 7 in indices:
            raise NoUsableVideo("slot 7 has none")
        return usable_mask(indices)

    monkeypatch.setattr(plan.stand_ins, "of", failing)
    monkeypatch.setattr(plan.videos, "usable_mask", lost)
    planned = plan_window(plans, 0)
    holding = {key for key, (_, epoch, iteration) in expected.views.items()
               if 7 in plan.batch_slots(epoch, iteration)}
    assert holding and planned.failed.keys() == holding
    assert {f.reason for f in planned.failed.values()} == {"slot 7 has none"}
    assert all(_values(planned.view_plans[key]) == _values(view)
               for key, view in expected.view_plans.items() if key not in holding)


def test_a_planned_window_keeps_no_draws():
    """Its epochs' draws, and what they drew alike (probes, stand-ins, pool anchors), go once
    its views are planned: the views hold what was drawn."""
    plan, = plans = _plans(_random_config(4), _videos(23, 4))
    plan_window(plans, 0)
    assert not plan.draws._epochs and not plan.draws._windows


def test_a_window_holds_one_epochs_draws_at_a_time(monkeypatch):
    """A task epoch's draws (each video's starts, branch and op draws, batches: tens of bytes a
    video) go once its views are resolved, before the next epoch's are held: a window of k
    epochs does not hold k epochs' draws at its peak."""
    plans = _plans(_random_config(4), _videos(23, 4), tasks=2)
    prepare, held = ClipDraws.prepare, []

    def preparing(self, epoch, indices):
        found = prepare(self, epoch, indices)
        held.append(sum(len(p.draws._epochs) for p in plans))
        return found

    monkeypatch.setattr(ClipDraws, "prepare", preparing)
    whole = plan_window(plans, 0)
    assert len(held) >= 2 * len(plans[0].window_epochs(0)) and max(held) == 2, held
    monkeypatch.setattr(ClipDraws, "prepare", prepare)
    again = plan_window(_plans(_random_config(4), _videos(23, 4), tasks=2), 0)
    assert {k: _values(v) for k, v in whole.view_plans.items()} == {
        k: _values(v) for k, v in again.view_plans.items()}


def test_a_windows_draws_go_before_its_uses_are_grouped(monkeypatch):
    """Grouping a window's uses (~95 bytes a clip while it runs) does not hold its draws too
    (~40 bytes a video an epoch): the window's peak holds one or the other."""
    plan, = plans = _plans(_random_config(4), _videos(23, 4))
    grouped, held = UseGroups.grouped, []

    def grouping(self, window):
        held.append(len(plan.draws._epochs))
        return grouped(self, window)

    monkeypatch.setattr(UseGroups, "grouped", grouping)
    plan_window(plans, 0)
    assert held == [0]


def test_views_resolved_already_leave_a_task_epochs_others_resolved_together(monkeypatch):
    """A window's part finds every other batch resolved by an earlier part: those are held as
    they are, and the rest of each task epoch is still resolved in one call, not one call
    between two resolved ones."""
    config, videos = _random_config(10), _videos(23, 10)
    whole = plan_window(_plans(config, videos), 0)
    earlier = {key: view for n, (key, view) in enumerate(whole.view_plans.items()) if n % 2}
    plan, = plans = _plans(config, videos)
    calls = []
    resolve_batches = plan.resolve_batches
    monkeypatch.setattr(plan, "resolve_batches", lambda epoch, iterations: (
        calls.append(len(iterations)) or resolve_batches(epoch, iterations)))
    planned = plan_window(plans, 0, resolved=earlier)
    assert len(calls) == len(plan.window_epochs(0)) and sum(calls) == len(whole.views) - len(
        earlier)
    held = {key: planned.view_plans[key] for key in earlier}  # made from their rows
    assert all(held[key] == view and held[key].clips.table is view.clips.table
               and held[key].clips.start == view.clips.start  # the same rows, not resolved again
               for key, view in earlier.items())
    assert all(_values(planned.view_plans[key]) == _values(view)
               for key, view in whole.view_plans.items())
    assert [list(w.uses) for w in planned.videos.values()] == [
        list(w.uses) for w in whole.videos.values()]  # in the views' order


@pytest.mark.parametrize("seed", range(4))
def test_batches_noted_at_once_group_as_noted_one_at_a_time(seed):
    """A task epoch's uses noted at once (`UseGroups.note_rows`, read from the clip table's
    columns) are those noted a batch at a time: any rows, rows of two tables, a batch
    resolved ahead (its clips not a table's: noted one at a time)."""
    plans = _plans(_random_config(seed), _videos(40, seed), tasks=2)
    plans[0].resolve_ahead(0, 0)
    window = plan_window(plans, 0)
    columns = window.views.table.columns
    table_of = columns.clip_rows(len(columns))[1]
    ahead = window.views.table.row_of(view_key(plans[0], 0, 0))
    assert table_of[ahead] == -1 and len(set(table_of.tolist()) - {-1}) > 1
    one_table = np.flatnonzero(table_of == table_of[-1])
    picks = [one_table.tolist(), sorted(np.random.default_rng(seed).choice(
        one_table, min(3, len(one_table)), replace=False).tolist()), list(range(len(columns)))]
    for rows in picks:
        one, many = UseGroups(columns), UseGroups(columns)
        for row in rows:
            one.note(plans[0], row)
        many.note_rows(plans[0], rows)
        for name in ("_batch", "_slot", "_index", "_plan"):
            assert getattr(many, name) == getattr(one, name), name
        grouped = one.grouped(0), many.grouped(0)
        assert [list(v.uses) for v in grouped[0].values()] == [
            list(v.uses) for v in grouped[1].values()]
