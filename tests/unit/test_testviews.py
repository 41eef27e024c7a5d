"""Evaluation views (`sampling.test_views`): coverage, order, determinism, clip spacing, the
fixed crops, metadata, and the config errors that keep them deterministic."""

from __future__ import annotations

from collections import Counter

import pytest

from sandfs.config.loader import load_task_config
from sandfs.config.yamlsafe import ConfigError
from sandfs.plan.coordination import Coordination
from sandfs.plan.task import TaskPlan
from sandfs.plan.testviews import clip_start, crop_origin
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import FAKE_DATASET, fake_videos


def step(name, inputs, outputs, *ops, branch_type="single"):
    return {"name": name, "branch_type": branch_type, "inputs": inputs, "outputs": outputs,
            "config": list(ops)}


PIPELINE = [
    step("resize", ["frame"], ["resized"], {"resize": {"shape": [36, 48]}}),
    step("crop", ["resized"], ["cropped"], {"center_crop": {"size": [32, 32]}}),
    step("flip", ["cropped"], ["out"], {"flip": {"p": 1.0}}),
]


def config(tmp_path, views=None, augmentation=PIPELINE, name="t0", seed=0, **sampling):
    sampling = {"samples_per_video": None, "test_views": views or {"clips": 3, "crops": 3},
                **sampling}
    cfg = task_config(FAKE_DATASET, task=name, seed=seed, sampling=sampling,
                      augmentation=augmentation)
    return load_task_config(write_config(tmp_path / f"{name}.yaml", cfg), check_paths=False)


def make_plan(tmp_path, videos=None, **kwargs) -> TaskPlan:
    return TaskPlan(config(tmp_path, **kwargs), videos or fake_videos(10), k_epochs=2)


def epoch_clips(plan, epoch):
    return [c for i in range(plan.iterations_per_epoch) for c in plan.view_plan(epoch, i).clips]


def test_every_video_once_per_epoch_with_all_its_views_in_sorted_order(tmp_path):
    plan = make_plan(tmp_path)
    assert plan.iterations_per_epoch == 3  # 10 videos, 4 per batch
    assert plan.view_plan(0, 0).shape == (4 * 9, 4, 32, 32, 3)
    assert plan.view_plan(0, 2).shape == (2 * 9, 4, 32, 32, 3)
    names = [v.name for v in plan.videos]
    for epoch in range(plan.epochs):
        clips = epoch_clips(plan, epoch)
        assert Counter(c.video_index for c in clips) == {v: 9 for v in range(10)}
        # video-major, then clip, then crop
        order = [names[c.video_index] for c in clips[::9]]
        assert order == sorted(names)
        assert [c.sample for c in clips[:9]] == list(range(9))
    assert epoch_clips(plan, 0) == epoch_clips(plan, 2)  # nothing is drawn per epoch


def test_two_plans_agree_whatever_their_names_and_seeds(tmp_path):
    first, second = make_plan(tmp_path), make_plan(tmp_path, name="other", seed=7)
    for epoch in range(first.epochs):
        for it in range(first.iterations_per_epoch):
            assert first.view_plan(epoch, it).clips == second.view_plan(epoch, it).clips
    assert first.plan_key(0) == first.plan_key(1)


def test_clip_starts_are_equally_spaced_over_the_valid_range(tmp_path):
    plan = make_plan(tmp_path, views={"clips": 5, "crops": 1}, videos=fake_videos(3, 120))
    span = plan.span_frames  # 4 frames, stride 2
    starts = [c.frame_indices[0] for c in epoch_clips(plan, 0) if c.video_index == 0]
    assert starts == [0, 28, 57, 85, 113] == [int(i * (120 - span) / 4 + 0.5) for i in range(5)]
    assert starts[-1] + span == 120
    assert clip_start(0, 1, 120, span) == 0
    assert clip_start(1, 2, 10, 3) == 7
    assert clip_start(1, 3, 10, 7) == 2  # 1.5 rounds half up


def test_three_crops_lie_left_center_right_or_top_center_bottom(tmp_path):
    plan = make_plan(tmp_path)
    crops = [c.ops[1] for c in epoch_clips(plan, 0)[:3]]
    assert [dict(op.drawn) for op in crops] == [{"x": 0, "y": 2}, {"x": 8, "y": 2},
                                                 {"x": 16, "y": 2}]
    assert crop_origin(0, 3, (48, 36), (32, 32)) == (0, 2)
    assert crop_origin(2, 3, (48, 36), (32, 32)) == (16, 2)
    assert crop_origin(0, 1, (36, 48), (32, 32)) == crop_origin(1, 3, (36, 48), (32, 32))
    # the center is center_crop's own: one crop gives the pipeline's center crop
    single = make_plan(tmp_path, views={"clips": 1, "crops": 1}, name="one")
    (clip, *_) = epoch_clips(single, 0)
    assert dict(clip.ops[1].drawn) == {"x": 8, "y": 2}


def test_metadata_names_the_clip_and_the_crop(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(4))
    view = plan.view_plan(0, 0)
    samples = plan.view_meta(view)["samples"]
    assert [(s["test_clip"], s["test_crop"]) for s in samples[:9]] == [
        (i, j) for i in range(3) for j in range(3)]
    width, height = 64, 48  # the source; resized to 48x36, cropped 32x32 at x 0 / 8 / 16
    assert [s["crop"] for s in samples[:3]] == [[0, 3, 43, height - 6], [11, 3, 42, 42],
                                                [21, 3, width - 21, 42]]
    assert all(s["flip"] for s in samples)


def test_a_training_task_beside_an_evaluation_task_plans_as_alone(tmp_path):
    train_path = write_config(tmp_path / "train.yaml",
                              task_config(FAKE_DATASET, task="train", sampling={"frame_stride": 3}))
    train_cfg = load_task_config(train_path, check_paths=False)
    test_cfg = config(tmp_path, name="eval", frames_per_video=16)
    alone = TaskPlan(train_cfg, fake_videos(10), k_epochs=2)
    both = Coordination([train_cfg, test_cfg])
    beside = TaskPlan(train_cfg, fake_videos(10), k_epochs=2, coordination=both)
    TaskPlan(test_cfg, fake_videos(10), k_epochs=2, coordination=both)
    assert alone.view_plan(1, 0) == beside.view_plan(1, 0)


@pytest.mark.parametrize(("sampling", "augmentation", "fragment"), [
    ({}, [step("resize", ["frame"], ["r"], {"resize": {"shape": [36, 48]}}),
          {"name": "maybe", "branch_type": "random", "inputs": ["r"], "outputs": ["o"],
           "branches": [{"prob": 0.5, "config": [{"center_crop": {"size": 32}}]},
                        {"prob": 0.5, "config": [{"center_crop": {"size": 32}}]}]}],
     r"branch_type: step 'maybe': a random branch is not allowed"),
    ({}, [step("crop", ["frame"], ["c"], {"center_crop": {"size": 32}}),
          step("jitter", ["c"], ["o"], {"flip": {"p": 0.5}})],
     r"augmentation\[1\]\.config: step 'jitter': flip is random"),
    ({}, [step("rrc", ["frame"], ["o"], {"random_resized_crop": {"size": 32}})],
     r"step 'rrc': random_resized_crop is random"),
    ({}, [step("crops", ["frame"], ["o"], {"center_crop": {"size": 40}},
               {"random_crop": {"size": 32}})],
     r"step 'crops': test_views places one crop per op list"),
    ({}, [step("resize", ["frame"], ["o"], {"resize": {"shape": [32, 32]}})],
     r"test_views: crops: 3 needs a center_crop or random_crop"),
    ({"test_views": {"clips": 2, "crops": 2}}, PIPELINE, r"crops: expected 1 \(center\) or 3"),
    ({"test_views": {"clips": 0}}, PIPELINE, r"clips: "),
    ({"test_views": {"clips": 2, "scale": 3}}, PIPELINE, r"scale"),
    ({"samples_per_video": 2}, PIPELINE, r"samples_per_video: test_views sets the clips"),
])
def test_config_errors_name_the_step(tmp_path, sampling, augmentation, fragment):
    with pytest.raises(ConfigError, match=fragment):
        config(tmp_path, augmentation=augmentation, **sampling)


def test_a_random_crop_is_placed_and_one_crop_needs_no_crop_step(tmp_path):
    pipeline = [step("crop", ["frame"], ["o"], {"random_crop": {"size": 32}})]
    plan = make_plan(tmp_path, augmentation=pipeline)
    assert [dict(c.ops[0].drawn)["x"] for c in epoch_clips(plan, 0)[:3]] == [0, 16, 32]
    resize_only = [step("resize", ["frame"], ["o"], {"resize": {"shape": [32, 32]}})]
    plan = make_plan(tmp_path, augmentation=resize_only, views={"clips": 2}, name="r")
    assert plan.view_plan(0, 0).shape == (8, 4, 32, 32, 3)


def test_deterministic_settings_of_random_ops_are_allowed(tmp_path):
    pipeline = [step("steps", ["frame"], ["o"], {"grayscale": {"p": 1.0}},
                     {"gaussian_blur": {"kernel_size": 3, "sigma": 1.0}},
                     {"flip": {"direction": "vertical", "p": 0.0}},
                     {"center_crop": {"size": 32}})]
    plan = make_plan(tmp_path, augmentation=pipeline)
    assert [op.drawn for op in plan.view_plan(0, 0).clips[0].ops[:3]] == [(), (), ()]
    blur = [step("blur", ["frame"], ["o"], {"gaussian_blur": {"kernel_size": 3}},
                 {"center_crop": {"size": 32}})]
    with pytest.raises(ConfigError, match="step 'blur': gaussian_blur is random"):
        config(tmp_path, augmentation=blur)
