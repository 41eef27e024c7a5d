"""Views depend on what a dataset is (its tag, relative paths and sizes), not where it lives."""

from __future__ import annotations

import shutil
from dataclasses import replace

from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.plan.identity import dataset_identity
from sandfs.plan.mount import plan_tasks
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import fake_videos, make_plan

EPOCHS = 4


def mount_plans(tmp_path, name: str, dataset):
    """Two tasks that share pools and crop windows (other strides, spans, crops and seeds),
    planned together as a mount reading `dataset` plans them."""
    other_crop = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["resized"],
         "config": [{"resize": {"shape": [36, 48]}}]},
        {"name": "crop", "branch_type": "single", "inputs": ["resized"], "outputs": ["cropped"],
         "config": [{"random_crop": {"size": [24, 24]}}]},
    ]
    configs = [
        task_config(dataset, epochs=EPOCHS),
        task_config(dataset, task="t1", seed=5, epochs=EPOCHS, augmentation=other_crop,
                    sampling={"frames_per_video": 3, "frame_stride": 3, "videos_per_batch": 3}),
    ]
    loaded = [load_task_config(write_config(tmp_path / f"{name}-{c['task']}.yaml", c))
              for c in configs]
    key = (loaded[0].dataset.video_dataset_path, loaded[0].dataset.extensions)
    scans = {key: scan_dataset(*key, workers=1)}
    return plan_tasks(loaded, scans, k_epochs=2)


def every_view(plans) -> list:
    return [(p.view_plan(e, i), p.view_meta(p.view_plan(e, i)), p.plan_key(p.window_of(e)))
            for p in plans for e in range(EPOCHS) for i in range(p.iterations_per_epoch)]


def test_the_same_videos_anywhere_plan_byte_identical_views(tmp_path, dataset_dir):
    copy = tmp_path / "mnt" / "node7" / "k400"
    shutil.copytree(dataset_dir, copy)
    (tmp_path / "link").symlink_to(copy)
    runs = {name: mount_plans(tmp_path, name, path) for name, path in
            (("orig", dataset_dir), ("copy", copy), ("link", tmp_path / "link"))}
    assert runs["orig"][0].videos[0].path != runs["copy"][0].videos[0].path  # really elsewhere
    reference = every_view(runs["orig"])
    assert len(reference) > 20
    for name in ("copy", "link"):
        assert every_view(runs[name]) == reference, name
        assert runs[name][0].coordination.state() == runs["orig"][0].coordination.state()
    # the two tasks do share a pool and crop windows (what keys them must be location-free)
    assert runs["orig"][0].coordination.crop_windows(runs["orig"][0].cfg, 0)
    assert runs["orig"][0].identity is runs["orig"][1].identity  # computed once per scan


def test_a_renamed_or_resized_file_is_another_dataset():
    videos = fake_videos(6)
    same = dataset_identity("train", reversed(videos))
    assert same == dataset_identity("train", videos)
    moved = [replace(v, path="/elsewhere/" + v.rel_path, mtime_ns=7) for v in videos]
    assert dataset_identity("train", moved) == same  # location and mtime are not identity
    renamed = [replace(videos[2], rel_path="c2/renamed.mp4", name="c2/renamed"),
               *videos[:2], *videos[3:]]
    resized = [replace(videos[4], size_bytes=videos[4].size_bytes + 1), *videos[:4], videos[5]]
    others = {dataset_identity("train", renamed), dataset_identity("train", resized),
              dataset_identity("val", videos), dataset_identity("train", videos[:5])}
    assert len(others) == 4 and same not in others


def test_a_resized_file_changes_the_views_of_the_others_too(tmp_path):
    videos = fake_videos(10)
    resized = [*videos[:9], replace(videos[9], size_bytes=12345)]
    first, second = make_plan(tmp_path, videos), make_plan(tmp_path, resized)
    assert first.identity != second.identity
    assert first.epoch_order(0).tolist() != second.epoch_order(0).tolist()
    assert first.view_plan(0, 0) != second.view_plan(0, 0)


def test_the_dataset_path_seeds_nothing(tmp_path):
    here = make_plan(tmp_path, fake_videos(10))
    dataset = replace(here.cfg.dataset, video_dataset_path="/somewhere/else")
    moved = TaskPlan(replace(here.cfg, dataset=dataset), fake_videos(10), k_epochs=2)
    for epoch in range(3):
        assert moved.view_plan(epoch, 1) == here.view_plan(epoch, 1)
        assert moved.plan_key(moved.window_of(epoch)) == here.plan_key(here.window_of(epoch))
