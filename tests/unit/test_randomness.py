"""Randomness under coordinated planning (the SAND paper, §5.2): a SlowFast-like and an
MAE-like task (different strides, clip counts and crop sizes) planned together on one dataset
keep uniform clip starts and crops, fresh draws per epoch and seed, nested clips across tasks,
exactly-once epochs
and deterministic plans, while decoding less than the same tasks planned independently.

Pure planning on fake videos: nothing is decoded. The fake dataset's identity (its tag, relative
paths and sizes) seeds every draw, so every run draws the same numbers and the chi-square p-values
are fixed.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
import yaml
from scipy import stats as scistats

from sandfs.config.loader import load_task_config
from sandfs.config.schema import TaskConfig
from sandfs.media.types import DatasetScan, VideoInfo
from sandfs.plan.mount import plan_tasks
from sandfs.plan.report import plan_report
from sandfs.plan.task import StreamClip, TaskPlan
from tests.helpers.harness import task_config

FAKE_DATASET = "/nonexistent/sandfs-randomness-dataset"
NUM_VIDEOS = 400
NUM_FRAMES = 100
FRAME_W, FRAME_H = 86, 64  # `resize: {size: 64}` keeps this size: crops are drawn on 64x86
KEYFRAME_INTERVAL = 25
K_EPOCHS = 5
EPOCHS = 25  # 5 windows; 400 videos x 25 epochs = 10,000 clips of the one-clip task
MIN_CLIPS = 10_000
VIDEOS_FOLLOWED = (0, 7, 133, 399)  # each one's starts over many windows
VIDEO_DRAWS = 1_250  # a video's: 14 per start value on average
P_MIN = 0.01
# (name, frames_per_video, frame_stride, samples_per_video, crop side)
SLOWFAST = ("slowfast", 8, 2, 1, 56)  # the largest crop: its crop *is* the shared window
MAE = ("mae", 4, 4, 2, 40)
TASKS = (SLOWFAST, MAE)


def fake_videos() -> tuple[VideoInfo, ...]:
    return tuple(
        VideoInfo(name=f"c{i % 4}/v{i:04d}", rel_path=f"c{i % 4}/v{i:04d}.mp4",
                  path=f"{FAKE_DATASET}/c{i % 4}/v{i:04d}.mp4", size_bytes=1000, mtime_ns=0,
                  width=FRAME_W, height=FRAME_H, num_frames=NUM_FRAMES,
                  frame_pts=tuple(range(NUM_FRAMES)), time_base=Fraction(1, 30),
                  keyframe_indices=tuple(range(0, NUM_FRAMES, KEYFRAME_INTERVAL)), seekable=True)
        for i in range(NUM_VIDEOS)
    )


def task_cfg(task: tuple, seed: int) -> TaskConfig:
    name, frames, stride, samples, crop_px = task
    augmentation = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"size": FRAME_H}}]},
        {"name": "crop", "branch_type": "single", "inputs": ["r"], "outputs": ["c"],
         "config": [{"random_crop": {"size": [crop_px, crop_px]}}]},
    ]
    sampling = {"videos_per_batch": 8, "frames_per_video": frames, "frame_stride": stride,
                "samples_per_video": samples}
    config = task_config(FAKE_DATASET, task=name, seed=seed, epochs=EPOCHS, sampling=sampling,
                         augmentation=augmentation)
    return load_task_config(f"{name}.yaml", text=yaml.safe_dump(config), check_paths=False)


def plan_pair(seed: int = 0, *, coordinate: bool = True, reverse: bool = False) -> list[TaskPlan]:
    """Fresh plans of both tasks, in TASKS order (`reverse`: registered the other way round)."""
    configs = [task_cfg(task, seed) for task in TASKS]
    scans = {(FAKE_DATASET, configs[0].dataset.extensions):
             DatasetScan(FAKE_DATASET, fake_videos(), ())}
    plans = plan_tasks(configs[::-1] if reverse else configs, scans, k_epochs=K_EPOCHS,
                       coordinate=coordinate)
    return sorted(plans, key=lambda p: [t[0] for t in TASKS].index(p.name))


@cache
def planned() -> list[TaskPlan]:
    return plan_pair()


@cache
def epoch_clips(task_index: int) -> list[tuple[int, StreamClip]]:
    """(epoch, clip) for every clip of every batch of the task, all epochs."""
    plan = planned()[task_index]
    return [(epoch, clip) for epoch in range(EPOCHS)
            for iteration in range(plan.iterations_per_epoch)
            for clip in plan.view_plan(epoch, iteration).clips]


def crop_origin(clip: StreamClip) -> tuple[int, int]:
    (crop,) = [op for op in clip.ops if op.name == "random_crop"]
    drawn = dict(crop.drawn)
    return drawn["x"], drawn["y"]


def start(plan: TaskPlan, epoch: int, video_index: int, sample: int = 0) -> int:
    return plan.clip_frames(epoch, video_index, sample)[0]


def valid_starts(task: tuple) -> int:
    _, frames, stride, _, _ = task
    return NUM_FRAMES - (frames - 1) * stride  # span = (frames - 1) * stride + 1


def assert_uniform(values: list[int], num_values: int) -> None:
    counts = np.bincount(values, minlength=num_values)
    assert len(counts) == num_values, f"value {len(counts) - 1} outside [0, {num_values})"
    assert counts.min() > 0, f"never drawn: {np.flatnonzero(counts == 0).tolist()}"
    p_value = scistats.chisquare(counts).pvalue
    assert p_value > P_MIN, f"chi-square p = {p_value:.2g} over {len(values)} draws"


# -- clip starts ------------------------------------------------------------------------------
# The frame pool correlates the clip starts of one video within a k-epoch window (that is how
# clips overlap), so a chi-square test, which needs independent draws, takes one clip per
# (video, window), rotating through the window's epochs and the task's samples.


@pytest.mark.parametrize("task_index", [0, 1], ids=[t[0] for t in TASKS])
def test_clip_starts_are_uniform_over_the_valid_range(task_index):
    plan, task = planned()[task_index], TASKS[task_index]
    windows = -(-MIN_CLIPS // NUM_VIDEOS)
    starts = [start(plan, w * K_EPOCHS + v % K_EPOCHS, v, (v // K_EPOCHS) % task[3])
              for w in range(windows) for v in range(NUM_VIDEOS)]
    assert len(starts) >= MIN_CLIPS
    assert_uniform(starts, valid_starts(task))


@pytest.mark.parametrize("task_index", [0, 1], ids=[t[0] for t in TASKS])
def test_clip_starts_of_a_video_are_uniform_across_epochs(task_index):
    """Each of a few videos' starts, one per window: their chi-square p-values combined
    (Fisher's method), a bias that every video shares adding up."""
    plan, task = planned()[task_index], TASKS[task_index]
    p_values = []
    for video in VIDEOS_FOLLOWED:
        starts = [start(plan, w * K_EPOCHS + w % K_EPOCHS, video, (w // K_EPOCHS) % task[3])
                  for w in range(VIDEO_DRAWS)]
        counts = np.bincount(starts, minlength=valid_starts(task))
        assert len(counts) == valid_starts(task) and counts.min() > 0
        p_values.append(scistats.chisquare(counts).pvalue)
    assert scistats.combine_pvalues(p_values).pvalue > P_MIN, p_values


# -- crops ------------------------------------------------------------------------------------


def test_largest_crop_is_uniform_over_the_frame():
    origins = [crop_origin(clip) for _, clip in epoch_clips(0)]
    assert len(origins) >= MIN_CLIPS
    crop_px = SLOWFAST[4]
    assert_uniform([x for x, _ in origins], FRAME_W - crop_px + 1)
    assert_uniform([y for _, y in origins], FRAME_H - crop_px + 1)


def position_pmf(window_positions: int, inner_positions: int) -> np.ndarray:
    """The distribution of a crop origin = window origin + origin inside the window, both
    uniform: a trapezoid over window_positions + inner_positions - 1 positions."""
    return np.convolve(np.full(window_positions, 1 / window_positions),
                       np.full(inner_positions, 1 / inner_positions))


@pytest.mark.parametrize(("axis", "frame_px"), [(0, FRAME_W), (1, FRAME_H)], ids=["x", "y"])
def test_smaller_crop_covers_the_frame_with_bounded_deviation(axis, frame_px):
    """The smaller crop is a uniform place inside the shared window, itself uniform in the
    frame: every position is reachable but the sum of two uniforms is a trapezoid. For y (a 56
    px window on 64 px, a 40 px crop) the edges get 1/153 instead of 1/25 (0.16x uniform), the
    middle 1/17 (1.47x); for x, 0.09x and 1.52x. Observed frequencies must stay within those
    bounds (25% slack for sampling noise) and match the trapezoid."""
    window_px, crop_px = SLOWFAST[4], MAE[4]
    positions = [crop_origin(clip)[axis] for _, clip in epoch_clips(1)]
    counts = np.bincount(positions, minlength=frame_px - crop_px + 1)
    assert len(counts) == frame_px - crop_px + 1 and counts.min() > 0
    pmf = position_pmf(frame_px - window_px + 1, window_px - crop_px + 1)
    ratio_to_uniform = counts / len(positions) * len(counts)
    uniform_ratios = pmf * len(counts)
    assert ratio_to_uniform.min() >= 0.75 * uniform_ratios.min()
    assert ratio_to_uniform.max() <= 1.25 * uniform_ratios.max()
    assert scistats.chisquare(counts, pmf * len(positions)).pvalue > P_MIN


def test_smaller_crops_lie_in_the_larger_tasks_window():
    """The shared window: in each epoch, the MAE-like task's first clip of a video crops inside
    the SlowFast-like task's crop of that video (the window), so the two can share pixels."""
    slowfast, mae = planned()
    big, small = SLOWFAST[4], MAE[4]
    for epoch in range(0, EPOCHS, 3):
        for video in range(0, NUM_VIDEOS, 7):
            (x, y) = crop_origin(slowfast.resolve_clip(epoch, 0, video, 0)[0])
            (sx, sy) = crop_origin(mae.resolve_clip(epoch, 0, video, 0)[0])
            assert x <= sx <= x + big - small and y <= sy <= y + big - small, (epoch, video)


# -- fresh draws ------------------------------------------------------------------------------


def share_differing(pairs) -> float:
    pairs = list(pairs)
    return sum(a != b for a, b in pairs) / len(pairs)


@pytest.mark.parametrize("task_index", [0, 1], ids=[t[0] for t in TASKS])
def test_a_videos_clip_start_changes_from_epoch_to_epoch(task_index):
    """Within a window the starts of a video lie in a pool of 2 spans (15 grid slots here):
    a repeat has probability ~1/15, so > 85% of consecutive epochs must differ."""
    plan = planned()[task_index]
    share = share_differing((start(plan, e, v), start(plan, e + 1, v))
                            for e in range(EPOCHS - 1) for v in range(0, NUM_VIDEOS, 4))
    assert share > 0.85


def test_the_shorter_clip_nests_in_the_longer_tasks_clip():
    """The pool clip (SAND §5.2): in each epoch the MAE-like task's first clip of a video takes
    its frames among the SlowFast-like task's frames of that video (its 13-frame span inside the
    other's 15 on the same grid), at a place that varies: so the two share decoded and cropped
    frames while each keeps uniform starts (the chi-square tests above)."""
    slowfast, mae = planned()
    places = Counter()
    for epoch in range(EPOCHS):
        for video in range(0, NUM_VIDEOS, 4):
            big = slowfast.clip_frames(epoch, video, 0)
            small = mae.clip_frames(epoch, video, 0)
            assert set(small) <= set(big), (epoch, video)
            places[small[0] - big[0]] += 1
    assert sorted(places) == [0, 2] and min(places.values()) > 0.3 * sum(places.values())


def test_the_tasks_second_samples_are_their_own():
    """Only sample 0 has a partner in the one-clip task: the MAE-like task's second clip
    differs from its first in almost every (epoch, video)."""
    _, mae = planned()
    share = share_differing((start(mae, e, v, 0), start(mae, e, v, 1))
                            for e in range(EPOCHS) for v in range(0, NUM_VIDEOS, 4))
    assert share > 0.85


def test_different_seeds_give_different_orders():
    first, second = planned(), plan_pair(seed=1)
    for plan, other in zip(first, second, strict=True):
        share = share_differing((plan.batch_videos(e, i), other.batch_videos(e, i))
                                for e in range(EPOCHS) for i in range(plan.iterations_per_epoch))
        assert share > 0.99


def test_different_seeds_give_different_crops():
    first, second = planned(), plan_pair(seed=1)
    for plan, other in zip(first, second, strict=True):
        share = share_differing((crop_origin(plan.resolve_clip(e, 0, v, 0)[0]),
                                 crop_origin(other.resolve_clip(e, 0, v, 0)[0]))
                                for e in range(0, EPOCHS, 5) for v in range(0, NUM_VIDEOS, 4))
        assert share > 0.9, plan.name


# -- data access rules and determinism --------------------------------------------------------


@pytest.mark.parametrize("task_index", [0, 1], ids=[t[0] for t in TASKS])
def test_each_video_exactly_once_per_epoch(task_index):
    samples = TASKS[task_index][3]
    by_epoch: dict[int, Counter] = {}
    for epoch, clip in epoch_clips(task_index):
        by_epoch.setdefault(epoch, Counter())[(clip.video_index, clip.sample)] += 1
    expected = Counter({(v, s): 1 for v in range(NUM_VIDEOS) for s in range(samples)})
    assert sorted(by_epoch) == list(range(EPOCHS))
    assert all(counts == expected for counts in by_epoch.values())


def test_identical_configs_and_seeds_give_identical_plans():
    """Fresh plans (nothing cached), also with the tasks registered the other way round."""
    for again in (plan_pair(), plan_pair(reverse=True)):
        for plan, other in zip(planned(), again, strict=True):
            for epoch, iteration in [(0, 0), (4, 49), (5, 3), (23, 17)]:
                assert plan.view_plan(epoch, iteration) == other.view_plan(epoch, iteration)


# -- what coordination buys -------------------------------------------------------------------


def test_planning_decodes_less_than_independent_tasks():
    coordinated = plan_report(planned(), K_EPOCHS)["total"]
    independent = plan_report(plan_pair(coordinate=False), K_EPOCHS)["total"]
    assert coordinated["clips"] == independent["clips"]
    # fewer distinct frames, so less to decode than the same window without coordination ...
    assert coordinated["frames_needed"] < 0.9 * independent["frames_needed"]
    assert coordinated["frames_decoded"] < independent["frames_decoded"]
    # ... and far less than every task decoding every clip on its own
    assert coordinated["frames_decoded"] < 0.5 * independent["frames_decoded_independent"]


def test_equal_crops_of_nested_clips_are_cropped_once():
    """With equal crop sizes the shared window is each task's crop: the MAE-like task's first
    clip (4 of the 16 frames the two tasks crop per video and epoch) reuses the SlowFast-like
    task's crops, a quarter of all crops."""
    tasks = (SLOWFAST, (*MAE[:4], SLOWFAST[4]))
    configs = [task_cfg(task, 0) for task in tasks]
    scans = {(FAKE_DATASET, configs[0].dataset.extensions):
             DatasetScan(FAKE_DATASET, fake_videos()[:80], ())}
    figures = {
        coordinate: plan_report(plan_tasks(configs, scans, k_epochs=K_EPOCHS,
                                           coordinate=coordinate), K_EPOCHS)["total"]
        for coordinate in (True, False)
    }
    assert figures[True]["crop_ops_independent"] == figures[False]["crop_ops_independent"]
    cut = 1 - figures[True]["crop_ops"] / figures[True]["crop_ops_independent"]
    assert 0.22 < cut < 0.3, cut  # a little over a quarter: chance repeats across epochs
    assert figures[False]["crop_ops"] > 0.99 * figures[False]["crop_ops_independent"]


@pytest.mark.parametrize("task_index", [0, 1], ids=[t[0] for t in TASKS])
def test_epoch_orders_are_unrelated(task_index):
    """No set_epoch bug (the same order every epoch): Kendall's tau between the video orders of
    any two of the first 10 epochs stays below 0.2 in magnitude (400 videos)."""
    plan = planned()[task_index]
    orders = [plan.epoch_order(epoch) for epoch in range(10)]
    for first in range(10):
        for second in range(first + 1, 10):
            tau = scistats.kendalltau(orders[first], orders[second]).statistic
            assert abs(tau) < 0.2, (first, second, tau)


def test_a_rank_reads_other_videos_every_epoch():
    """No DistributedSampler set_epoch bug: rank 0 of 4 does not read the same quarter of the
    videos every epoch; its share of each epoch overlaps another epoch's by about a quarter."""
    from sandfs.plan.shard import shard_configs

    configs = shard_configs(task_cfg(SLOWFAST, 0), 4)
    scans = {(FAKE_DATASET, configs[0].dataset.extensions):
             DatasetScan(FAKE_DATASET, fake_videos(), ())}
    rank0 = plan_tasks(configs, scans, k_epochs=K_EPOCHS)[0]
    held = [set(rank0.epoch_order(epoch).tolist()) for epoch in range(10)]
    assert all(len(videos) == NUM_VIDEOS // 4 for videos in held)
    for first in range(10):
        for second in range(first + 1, 10):
            assert 10 < len(held[first] & held[second]) < 45, (first, second)
