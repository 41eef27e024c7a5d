"""A PySlowFast-style task through a real mount: its `path label_index` labels file, a random
short-side scale jitter then a crop (its training default), three random branches of 0.333.
Views equal the reference oracle's; label_index is the file's number; the scale is drawn per
clip, the same on every run of the same seed."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.reference import reference_view

JITTER = [
    {"name": "jitter", "branch_type": "single", "inputs": ["frame"], "outputs": ["scaled"],
     "config": [{"random_short_side_scale": {"min_size": 40, "max_size": 64}}]},
    {"name": "thirds", "branch_type": "random", "inputs": ["scaled"], "outputs": ["turned"],
     "branches": [{"prob": 0.333, "config": [{"flip": {"direction": "horizontal"}}]},
                  {"prob": 0.333, "config": [{"flip": {"direction": "vertical"}}]},
                  {"prob": 0.333, "config": []}]},
    {"name": "crop", "branch_type": "single", "inputs": ["turned"], "outputs": ["cropped"],
     "config": [{"random_crop": {"size": [32, 32]}}]},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, dataset_dir):
    workdir = tmp_path_factory.mktemp("pyslowfast")
    videos = sorted(dataset_dir.rglob("*.mp4"))
    numbers = {str(v.relative_to(dataset_dir)): 10 + i % 3 for i, v in enumerate(videos)}
    (workdir / "train.csv").write_text(
        "".join(f"/datasets/k400/train/{path} {n}\n" for path, n in numbers.items()))
    cfg = task_config(dataset_dir, augmentation=JITTER)
    cfg["dataset"]["labels"] = str(workdir / "train.csv")
    config_path = write_config(workdir / "task.yaml", cfg)
    loaded = load_task_config(config_path)
    found = scan_dataset(loaded.dataset.video_dataset_path, loaded.dataset.extensions)
    plan = TaskPlan(loaded, found.videos, k_epochs=loaded.engine.k_epochs)
    with mount_sandfs(workdir, [config_path]) as mounted:
        yield mounted, plan, numbers


def test_views_equal_the_reference_and_labels_are_the_files_numbers(setup):
    mounted, plan, numbers = setup
    assert json.loads(os.getxattr(mounted.path("t0"), "user.sand.classes")) == [
        str(i) for i in range(13)]
    scales = set()
    for epoch in range(plan.epochs):
        for iteration in range(plan.iterations_per_epoch):
            path = mounted.path("t0", str(epoch), str(iteration), "view")
            assert path.read_bytes() == reference_view(plan, epoch, iteration)
            meta = json.loads(os.getxattr(path, "user.sand.meta"))
            for sample in meta["samples"]:
                assert sample["label_index"] == numbers[sample["video"] + ".mp4"]
                scales.add(round(sample["crop"][2], 3))  # 32 px in source pixels: 32*48/size
    assert len(scales) > 3  # the short side was drawn per clip, not once


def test_the_scale_is_drawn_per_clip_from_the_seed(setup):
    _, plan, _ = setup
    sizes = [dict(inst.drawn)["size"] for c in plan.view_plan(0, 0).clips for inst in c.ops
             if inst.name == "random_short_side_scale"]
    assert sizes and all(40 <= s <= 64 for s in sizes)
    again = TaskPlan(plan.cfg, plan.videos, k_epochs=plan.k_epochs)
    assert [c.ops for c in again.view_plan(0, 0).clips] == [
        c.ops for c in plan.view_plan(0, 0).clips]
    assert np.load(io.BytesIO(reference_view(again, 1, 0))).shape == (4, 4, 32, 32, 3)
