"""The batches a window's planning draws together (`ClipDraws.prepare_batches`) hold the videos
`TaskPlan.batch_videos` finds one batch at a time (a bad video's stand-in, a short last batch,
a batch whose stand-in is not found failing alone), in arrays: no int object a video."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sandfs.config.loader import load_task_config
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, ListedVideo
from sandfs.plan import window
from sandfs.plan.clipdraws import EpochDraws
from sandfs.plan.probed import NoUsableVideo
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import FAKE_DATASET, fake_videos

VIDEOS, PER_BATCH, BAD, NOT_FOUND = 23, 4, (4, 11, 12), 7


def _plan(tmp_path: Path, seed: int) -> TaskPlan:
    """23 videos, 3 of them bad, in batches of 4 (the last short); slot 7's stand-in is not
    found (its batches fail, with the reason)."""
    infos = fake_videos(VIDEOS)
    listed = [ListedVideo(v.name, v.rel_path, v.path, 1, 1) for v in infos]
    book = ProbeBook(listed, threading.Event())
    for i, info in enumerate(infos):
        book.record(info.rel_path, BadVideo(info.rel_path, "open_invalid", "no")
                    if i in BAD else info)
    config = task_config(FAKE_DATASET, seed=seed, epochs=3,
                         sampling={"videos_per_batch": PER_BATCH, "drop_last": False})
    cfg = load_task_config(write_config(tmp_path / f"t{seed}.yaml", config), check_paths=False)
    plan = TaskPlan(cfg, listed, k_epochs=2, probes=book)
    stand_in, usable_mask = plan.stand_ins.of, plan.videos.usable_mask

    def failing(index: int) -> int:
        if index == NOT_FOUND:
            raise NoUsableVideo(f"slot {index} has none")
        return stand_in(index)

    def lost(indices: list[int]):  # read with the others, it fails them all
        if NOT_FOUND in indices:
            raise NoUsableVideo(f"slot {NOT_FOUND} has none")
        return usable_mask(indices)

    plan.stand_ins.of = failing  # type: ignore[method-assign]
    plan.videos.usable_mask = lost  # type: ignore[method-assign]
    return plan


def _alone(plan: TaskPlan, epoch: int, iteration: int) -> list[int] | None:
    try:
        return plan.batch_videos(epoch, iteration)
    except NoUsableVideo:
        return None


@pytest.mark.parametrize("seed", range(4))
def test_batches_drawn_together_are_those_found_one_at_a_time(tmp_path, seed):
    together, alone = _plan(tmp_path, seed), _plan(tmp_path, seed)
    per = together.iterations_per_epoch
    assert per * PER_BATCH > VIDEOS  # a short last batch
    rng = np.random.default_rng(seed)
    expected, found = [], []
    for epoch in range(together.epochs):
        drawn = rng.permutation(per)[: per - 1].tolist()  # some, in any order; one not
        together.draws.prepare_batches(epoch, drawn)
        held = together.draws.drawn(epoch)
        for iteration in range(per):
            expected.append(_alone(alone, epoch, iteration) if iteration in drawn else None)
            found += held.take_batches([iteration])
            assert held.take_batches([iteration]) == [None]  # taken once
    assert found == expected
    assert None in expected and any(len(b or ()) == VIDEOS % PER_BATCH for b in expected)
    assert not {v for b in found if b for v in b} & set(BAD)  # their stand-ins hold them


def test_a_batch_out_of_the_epoch_is_not_held(tmp_path):
    plan = _plan(tmp_path, 0)
    plan.draws.prepare_batches(0, [0])
    held = plan.draws.drawn(0)
    assert held.take_batches([-1, plan.iterations_per_epoch, 0]) == [None, None,
                                                                     _alone(plan, 0, 0)]


@pytest.mark.parametrize("seed", range(3))
def test_batches_taken_at_once_are_those_found_one_at_a_time(tmp_path, seed):
    """`take_batches` (a task epoch's views resolved together) takes each held batch once
    (asked twice: the first time), none out of the epoch or not drawn."""
    together, alone = _plan(tmp_path, seed), _plan(tmp_path, seed)
    per = together.iterations_per_epoch
    rng = np.random.default_rng(seed)
    drawn = rng.permutation(per)[: per - 1].tolist()
    together.draws.prepare_batches(0, drawn)
    asked = [*rng.permutation(per).tolist(), -1, per, drawn[0], drawn[1]]
    found = together.draws.drawn(0).take_batches(asked)
    assert found == [_alone(alone, 0, i) if i in drawn and place < per else None
                     for place, i in enumerate(asked)]
    assert sum(b is not None for b in found) > 1
    assert together.draws.drawn(0).take_batches(asked) == [None] * len(asked)  # taken once


def test_batches_drawn_together_hold_no_int_object_a_video(tmp_path):
    """Held as int32 arrays: holding 500 batches of 2,000 videos allocates nothing more than
    a few stray bytes once the epoch's draws and order are made (a list of ints a batch:
    ~45 bytes a video)."""
    path = write_config(tmp_path / "t.yaml", task_config(
        FAKE_DATASET, sampling={"videos_per_batch": PER_BATCH}))
    plan = TaskPlan(load_task_config(path, check_paths=False), fake_videos(2000), k_epochs=2)
    every = range(plan.iterations_per_epoch)
    plan.draws.prepare_batches(1, every)  # every video's stand-in found
    plan.draws.prepare(0, range(2000))
    plan.epoch_order(0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        plan.draws.prepare_batches(0, every)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2000, grown  # bytes, for 2,000 videos
    held = plan.draws.drawn(0)
    assert held.batch_videos.dtype == np.int32 and held.batch_counts.dtype == np.int32
    assert held.take_batches([3]) == [plan.batch_videos(0, 3)]


def test_a_windows_batches_are_drawn_by_epoch_without_an_int_object_a_batch(tmp_path):
    """`plan_window` lists each task epoch's batches to draw as the arrays its rows were
    added from (2 epochs of 1,000 batches: 16 KB; as lists of ints: 66 KB); a view held
    already is not drawn."""
    path = write_config(tmp_path / "t.yaml", task_config(
        FAKE_DATASET, sampling={"videos_per_batch": PER_BATCH}))
    plan = TaskPlan(load_task_config(path, check_paths=False), fake_videos(4000), k_epochs=2)
    rows, added = window._batch_rows([plan], 0, None)
    drawn = window._to_draw(added, frozenset(), {})
    assert [(p is plan, epoch, its.tolist()) for (p, epoch), its in drawn.items()] == [
        (True, 0, list(range(1000))), (True, 1, list(range(1000)))]
    assert all(type(its) is np.ndarray and its.nbytes == 8000 for its in drawn.values())
    assert len(rows) == 2000
    held = {window.view_key(plan, 1, 7), window.view_key(plan, 0, 999)}
    drawn = window._to_draw(added, frozenset(), held)
    assert [len(its) for its in drawn.values()] == [999, 999]
    assert 7 not in drawn[plan, 1].tolist() and 999 not in drawn[plan, 0].tolist()


def test_the_stand_ins_of_usable_videos_are_read_at_once(tmp_path, monkeypatch):
    """A window's usable videos are their own stand-ins, read from the probes in one pass:
    only the bad ones and those their search walks over are asked one at a time."""
    plan = _plan(tmp_path, 0)
    del plan.stand_ins.of, plan.videos.usable_mask  # no stand-in lost here
    asked, result = [], plan.probes.result
    monkeypatch.setattr(plan.probes, "result", lambda rel: asked.append(rel) or result(rel))
    plan.draws.prepare_batches(0, range(plan.iterations_per_epoch))
    walked = {plan.listed[i].rel_path for i in {*BAD, *(b + 1 for b in BAD)}}  # 12 follows 11
    assert asked and set(asked) <= walked
    held = plan.draws.drawn(0)
    taken = held.take_batches(range(plan.iterations_per_epoch))
    assert sorted(v for batch in taken for v in batch) == (
        sorted(plan.stand_in(i) for i in range(VIDEOS)))


def test_a_window_reads_its_videos_probes_at_once(tmp_path, monkeypatch):
    """Planning a window asks the probe book for no usable video one at a time: drawing,
    resolving and grouping its uses read them for all its videos at once."""
    plan = _plan(tmp_path, 1)
    del plan.stand_ins.of, plan.videos.usable_mask  # no stand-in lost here
    asked, result = [], plan.probes.result
    monkeypatch.setattr(plan.probes, "result", lambda rel: asked.append(rel) or result(rel))
    planned = window.plan_window([plan], 0)
    assert not planned.failed and len(planned.videos) == VIDEOS - len(BAD)
    walked = {plan.listed[i].rel_path for i in {*BAD, *(b + 1 for b in BAD)}}
    assert asked and set(asked) <= walked


def test_an_epoch_of_no_batches_takes_none():
    """An epoch too short for a batch (drop_last) holds no row: asking takes nothing."""
    held = EpochDraws(np.zeros(3, bool), np.zeros((3, 1), np.int32), {}, {}, False,
                      np.zeros((3, 3), np.int32), np.zeros((0, 4), np.int32),
                      np.zeros(0, np.int32))
    assert held.take_batches([0, -1, 0]) == [None, None, None]
