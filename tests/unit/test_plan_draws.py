"""The draws of a plan stay byte-identical (docs/contract.md#determinism): every clip of every
view of several configs, digested, against the digests recorded for this plan version, batch by
batch and as windows plan them; the array draws against each clip's own (`seeds.py`) and
numpy's own generators."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml

from sandfs import ops as oplib
from sandfs.config.loader import load_task_config
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import DatasetScan
from sandfs.ops.base import OpType
from sandfs.plan import clipdraws
from sandfs.plan.cliptable import TableClips
from sandfs.plan.draws import (
    FirstOutput,
    NeedGenerator,
    digest_words,
    key_texts,
    mixed_words,
    pcg64_first,
    unit_columns,
)
from sandfs.plan.mount import plan_tasks
from sandfs.plan.seeds import _digest, clip_rng, key_words, purpose_word, rng_for
from sandfs.plan.window import plan_window, view_key
from tests.helpers.harness import task_config
from tests.helpers.plans import FAKE_DATASET, fake_videos, make_plan

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "benchmarks" / "configs"


def _varied(count: int) -> list:
    """Videos of several lengths and sizes (some shorter than a clip's span)."""
    videos = fake_videos(count)
    return [dataclasses.replace(v, num_frames=(9, 40, 120, 301)[i % 4],
                                width=(64, 200, 340)[i % 3], height=(48, 150, 256)[i % 3],
                                frame_pts=tuple(range((9, 40, 120, 301)[i % 4])))
            for i, v in enumerate(videos)]


def _config(text: str):
    return load_task_config(Path("t.yaml"), text=text, check_paths=False)


def _bench(name: str, **sampling) -> str:
    config = yaml.safe_load((CONFIGS / name).read_text())
    config["dataset"]["video_dataset_path"] = str(FAKE_DATASET)
    config["epochs"] = 6
    config["dataset"]["sampling"] |= sampling
    return yaml.safe_dump(config)


def _harness(**overrides) -> str:
    return yaml.safe_dump(task_config(FAKE_DATASET, **overrides))


def _single(name: str, source: str, output: str, ops: list) -> dict:
    return {"name": name, "branch_type": "single", "inputs": [source], "outputs": [output],
            "config": ops}


CASES = {
    "harness": ([_harness()], 10),
    "harness_short_wrap": ([_harness(sampling={"frames_per_video": 8, "frame_stride": 3,
                                               "short_video": "wrap",
                                               "samples_per_video": 2})], 24),
    "single": ([_bench("single.yaml")], 40),
    "slowfast": ([_bench("slowfast.yaml", samples_per_video=2)], 40),
    "pair": ([_bench("planning/slowfast.yaml"), _bench("planning/mae.yaml")], 30),
    "coins": ([_harness(augmentation=[
        _single("resize", "frame", "resized", [{"resize": {"shape": [36, 48]}}]),
        _single("aug", "resized", "out", [{"random_crop": {"size": [32, 36]}},
                                          {"flip": {"direction": "horizontal", "p": 1.0}},
                                          {"grayscale": {"p": 0.3}},
                                          {"random_crop": {"size": [30, 30]}}])])], 12),
    "forks": ([_harness(augmentation=[
        {"name": "two", "branch_type": "multi", "inputs": ["frame"], "outputs": ["a", "b"],
         "branches": [{"config": [{"random_resized_crop": {"size": [32, 32]}}]},
                      {"config": [{"resize": {"shape": [40, 40]}},
                                  {"random_crop": {"size": [32, 32]}}]}]},
        {"name": "join", "branch_type": "merge", "inputs": ["a", "b"], "outputs": ["ab"]},
        _single("flip", "ab", "out", [{"flip": {"direction": "vertical", "p": 0.5}}])],
        sampling={"samples_per_video": 2})], 12),
    "full": ([(REPO / "configs" / "example-full.yaml").read_text().replace(
        "../demo-data/videos", str(FAKE_DATASET))], 20),
}


def clips_digest(texts: list[str], count: int) -> str:
    digest = hashlib.sha256()
    for plan in _plans(texts, count):
        for epoch in range(plan.epochs):
            for iteration in range(plan.iterations_per_epoch):
                digest.update(repr([_values(c) for c in plan.view_plan(epoch, iteration).clips])
                              .encode())
    return digest.hexdigest()


RECORDED = {  # clips_digest of plan version 5, its clips drawn batch by batch
    "harness": "e66fba17233d37c8a6c2451d125988e095bab30b31701cfff679f020c2c8adb0",
    "harness_short_wrap": "b5f40c2c098c4667e2b3450a63e55a86ddb05bb16a6832c13bc51a2778d15038",
    "single": "b8ba47b745b31c7ac4f832972910509e97d79badf6df28835b2233838c2935df",
    "slowfast": "09d6d341e961bd30a26537ae2f304703e2e7adda200ef873586ae180d608e1ae",
    "pair": "b8d1143e219dc9fa385aeeaeece4e7d849295be6b6e93afa5f209283cb34c230",
    "full": "8c7228775452048f87d29ff62d2f5acda0d6f633181286837b1469397757a375",
    "coins": "e2ab4d4a3dcceb7abe11e2d1b6fe6ba977d77d097d2d8af5197fbc466d7fe71c",
    "forks": "199f0aacc6ff70ff71e418ded48e5914968bddf4a60e92c5e9cedb004a78e5f8",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_draw_what_they_drew_clip_by_clip(name):
    texts, count = CASES[name]
    assert clips_digest(texts, count) == RECORDED[name]


def window_clips_digest(texts: list[str], count: int) -> str:
    """`clips_digest` of the views as their windows plan them (their clips rows of a
    `ClipTable`, made again as they are read)."""
    plans = _plans(texts, count)
    windows = {w: plan_window(plans, w) for w in range(max(p.window_of(p.epochs - 1)
                                                           for p in plans) + 1)}
    digest = hashlib.sha256()
    for plan in plans:
        for epoch in range(plan.epochs):
            planned = windows[plan.window_of(epoch)]
            for iteration in range(plan.iterations_per_epoch):
                clips = planned.view_plans[view_key(plan, epoch, iteration)].clips
                assert isinstance(clips, TableClips)
                digest.update(repr([_values(c) for c in clips]).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("name", sorted(CASES))
def test_windows_hold_the_clips_drawn_clip_by_clip(name):
    texts, count = CASES[name]
    assert window_clips_digest(texts, count) == RECORDED[name]


def test_plain_paths_are_made_from_templates():
    """The configs above that `StaticPath` serves, and those it leaves to the walk."""
    static = {name: [p.static_paths for p in _plans(*CASES[name])]
              for name in ("single", "coins", "forks", "pair", "harness", "full")}
    assert all(all(plan) for name in ("single", "coins", "forks", "pair")
               for plan in static[name])
    assert not any(any(plan) for name in ("harness", "full") for plan in static[name])


class _MapDraw(OpType):
    """Draws a mapping (unhashable)."""

    name = "test_map_draw"
    random = True

    def validate(self, raw):
        return {}

    def draw(self, params, rng, in_hw):
        return {"a": int(rng.integers(0, 7)), "b": int(rng.integers(0, 3))}


def test_templates_make_the_clips_the_walk_makes(monkeypatch):
    """Including crops in a window shared with another task (`pair`)."""
    monkeypatch.setitem(oplib._OPS, _MapDraw.name, _MapDraw())
    mapped = _harness(augmentation=[_single("x", "frame", "out", [
        {"random_crop": {"size": [30, 30]}}, {"test_map_draw": {}}])])
    for texts, count in (CASES["single"], CASES["coins"], CASES["forks"], CASES["pair"],
                         ([mapped], 8)):
        templated, walked = _plans(texts, count), _plans(texts, count)
        for plan in walked:
            plan.static_paths = [None] * len(plan.paths)
        for fast, slow in zip(templated, walked, strict=True):
            assert all(fast.static_paths)
            for epoch in range(fast.epochs):
                for iteration in range(fast.iterations_per_epoch):
                    assert fast.view_plan(epoch, iteration) == slow.view_plan(epoch, iteration)


def test_a_window_plans_the_views_a_batch_alone_plans():
    """Drawn for a whole window at once (`plan_window`) or for one batch on demand."""
    texts, count = CASES["pair"]
    window_plans = _plans(texts, count)
    alone = {p.name: p for p in _plans(texts, count)}
    for window in (0, 1):
        planned = plan_window(window_plans, window)
        assert not any(p.draws._epochs for p in window_plans)  # the views hold what was drawn
        for key, (plan, epoch, iteration) in planned.views.items():
            assert planned.view_plans[key] == alone[plan.name].view_plan(epoch, iteration)


def test_a_batch_planned_again_after_its_draws_were_dropped_is_the_same():
    plan = _plans([_harness(epochs=8)], 12)[0]
    first = [plan._view_plan(0, i) for i in range(plan.iterations_per_epoch)]
    for epoch in range(1, plan.epochs):  # more epochs than the draws kept
        plan.draws.prepare_batches(epoch, range(plan.iterations_per_epoch))
    assert 0 not in plan.draws._epochs
    assert [plan._view_plan(0, i) for i in range(plan.iterations_per_epoch)] == first


KEYS = [(7 << 100, 4, f"c{i % 3}/v{i:04d}", i % 2, "op", (("crop", i % 2),), i % 3)
        for i in range(3000)]


def test_array_digests_and_first_outputs_are_numpys():
    head, tail = (7 << 100, 4), ("op", (("crop", 1),), 2)
    keys = [(*head, f"c{i % 3}/v{i:04d}", i % 2, *tail) for i in range(3000)]
    words = digest_words(key_texts(head, [f"{k[2]!r}, {k[3]!r}" for k in keys], tail))
    assert words.tolist() == [np.frombuffer(_digest(k), "<u8").tolist() for k in keys]
    first = pcg64_first(words).tolist()
    assert first == [int(rng_for(*k).integers(0, 1 << 64, dtype=np.uint64)) for k in keys]


@pytest.mark.parametrize("name", ["coins", "forks", "full", "pair"])
def test_an_epochs_draws_are_each_clips_own(name):
    """Drawn for the epoch's videos at once, as each clip's own draws say (`seeds.py`): a
    branch's draw from its words, an op's first output that of its generator."""
    texts, count = CASES[name]
    for plan in _plans(texts, count):
        drawn, samples = plan.draws.prepare(1, range(count)), plan.sampling.samples_per_video
        assert drawn.outputs
        for video in range(count):
            info = plan.videos[video]
            key = key_words(plan.data_key, "video", info.name)[None, :2]
            for sample in range(samples):
                for prefix, column in drawn.units.items():
                    words = mixed_words(key, purpose_word("branch", prefix), 1,
                                        np.array([sample]), 1)
                    assert column[video, sample] == unit_columns(words, 1)[0, 0]
                for (prefix, pos), column in drawn.outputs.items():
                    own = clip_rng(plan.data_key, 1, info.name, sample, "op", prefix, pos)
                    assert int(column[video, sample]) == int(
                        own.integers(0, 1 << 64, dtype=np.uint64))


@pytest.mark.parametrize("spans", [(1, 17), (17, 1), (2, 2), (100, 57), (1 << 31, 3 << 30),
                                   ((1 << 32) - 3, 5), ((1 << 32) - 1, 9), (1 << 33, 4)])
def test_first_output_draws_as_numpys_generator_or_asks_for_it(spans):
    """Lemire's draw on 32-bit halves, a span of 1 drawing nothing; a rejection (likely for
    spans near 2**32), a 64-bit span or a second output raise NeedGenerator."""
    asked = 0
    for key, output in zip(KEYS, pcg64_first(digest_words([repr(k) for k in KEYS])).tolist(),
                           strict=True):
        stand_in, real = FirstOutput(output), rng_for(*key)
        try:
            drawn = [stand_in.integers(3, 3 + span) for span in spans]
        except NeedGenerator:
            asked += 1
            continue
        assert drawn == [int(real.integers(3, 3 + span)) for span in spans]
        assert FirstOutput(output).random() == rng_for(*key).random()
        with pytest.raises(NeedGenerator):
            FirstOutput(output).uniform(0, 1)
    if {3 << 30, (1 << 32) - 1, 1 << 33} & set(spans):  # a quarter rejected, or 64-bit draws
        assert asked > 0
    if max(spans) <= 100:
        assert asked == 0


def _values(clip) -> tuple:
    """A clip's values, its frames as a tuple whatever sequence holds them."""
    return (clip.video_index, clip.sample, clip.stream, tuple(clip.frame_indices), clip.ops,
            clip.step_depths, clip.branches, clip.source)


def _plans(texts: list[str], count: int) -> list:
    configs = [_config(t) for t in texts]
    scan = DatasetScan(str(FAKE_DATASET), tuple(_varied(count)), ())
    scans = {(configs[0].dataset.video_dataset_path, configs[0].dataset.extensions): scan}
    return plan_tasks(configs, scans, k_epochs=2)


if __name__ == "__main__":  # records RECORDED from a commit's planner
    for name, (texts, count) in CASES.items():
        print(f"    {name!r}: {clips_digest(texts, count)!r},")


def test_a_probe_waited_for_holds_up_no_other_draws(tmp_path):
    """A lazy scan's video not probed yet: drawing it waits for its probe, outside the lock
    that the task's other draws take (a batch's metadata read meanwhile)."""
    videos = fake_videos(6)
    book = ProbeBook(videos)
    for video in videos[:-1]:
        book.record(video.rel_path, video)
    plan = make_plan(tmp_path, videos)
    plan.probes = plan.videos.probes = book
    late = plan.video_index[videos[-1].name]
    waiting = threading.Thread(target=plan.draws.prepare, args=(0, [late]), daemon=True)
    waiting.start()
    time.sleep(0.2)
    assert waiting.is_alive()
    other = plan.video_index[videos[0].name]
    meanwhile = threading.Thread(target=plan.draws.prepare, args=(0, [other]), daemon=True)
    meanwhile.start()
    meanwhile.join(2.0)
    book.record(videos[-1].rel_path, videos[-1])
    assert not meanwhile.is_alive()
    waiting.join(5)
    assert not waiting.is_alive() and plan.draws.prepare(0, []).done[late]


@pytest.mark.parametrize("name", ["harness_short_wrap", "pair"])
def test_draws_made_a_few_clips_at_a_time_are_those_made_at_once(monkeypatch, name):
    texts, count = CASES[name]
    at_once = _plans(texts, count)
    monkeypatch.setattr(clipdraws, "CLIPS_DRAWN_AT_ONCE", 5)  # 2 or 5 videos at a time
    apart = _plans(texts, count)
    for one, other in zip(at_once, apart, strict=True):
        for epoch in range(one.epochs):
            rows = np.random.default_rng(epoch).permutation(count)[: count - 3]
            drawn, again = one.draws.prepare(epoch, rows), other.draws.prepare(epoch, rows)
            assert (drawn.done == again.done).all() and drawn.done.sum() == count - 3
            assert (drawn.starts == again.starts).all() and (drawn.sizes == again.sizes).all()
            for made, remade in ((drawn.units, again.units), (drawn.outputs, again.outputs)):
                assert made.keys() == remade.keys()
                assert all((made[k] == remade[k]).all() for k in made)


def test_drawing_a_whole_epoch_holds_a_few_clips_texts_at_a_time(monkeypatch, tmp_path):
    """Drawing 4,096 videos at once: what it frees after (key texts, digests: ~500 bytes a
    clip) stays bounded by the clips drawn at once."""
    plan = make_plan(tmp_path, fake_videos(4096))
    plan.draws.prepare(1, range(4096))  # probes looked up, pool anchors drawn: the window's
    monkeypatch.setattr(clipdraws, "CLIPS_DRAWN_AT_ONCE", 256)
    tracemalloc.start()
    try:
        plan.draws.prepare(0, range(4096))
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - after < 512 * 1024, peak - after  # 2.1 MB drawn at once
