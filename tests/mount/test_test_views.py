"""Evaluation views through a real mount: every video once per epoch in sorted order with its
T x S views, equal to an oracle that follows the PySlowFast recipe by hand (a full PyAV decode,
evenly spaced clip starts, an OpenCV resize, left / center / right crops)."""

from __future__ import annotations

import io
import json
import os

import av
import cv2
import numpy as np

from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.reference import reference_view

CLIPS, CROPS, FRAMES, STRIDE = 2, 3, 4, 2


def oracle_views(video_path: str) -> list[np.ndarray]:
    """The video's CLIPS x CROPS clips, clip-major: (FRAMES, 32, 32, 3) each."""
    with av.open(video_path) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    span = (FRAMES - 1) * STRIDE + 1
    views = []
    for clip in range(CLIPS):
        start = int(clip * (len(frames) - span) / max(CLIPS - 1, 1) + 0.5)
        resized = [cv2.resize(frames[start + j * STRIDE], (48, 36), interpolation=cv2.INTER_LINEAR)
                   for j in range(FRAMES)]
        for x in (0, 8, 16):  # left, center, right of a 48x36 frame; y centered: 2
            views.append(np.stack([f[2:34, x:x + 32] for f in resized]))
    return views


def test_test_views_equal_the_oracle_and_cover_every_video(tmp_path, dataset_dir):
    pipeline = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"shape": [36, 48]}}]},
        {"name": "crop", "branch_type": "single", "inputs": ["r"], "outputs": ["c"],
         "config": [{"center_crop": {"size": [32, 32]}}]},
    ]
    sampling = {"frames_per_video": FRAMES, "frame_stride": STRIDE, "samples_per_video": None,
                "videos_per_batch": 5, "test_views": {"clips": CLIPS, "crops": CROPS}}
    # one epoch per window: three windows, the later ones from frames decoded ahead
    config = task_config(dataset_dir, task="eval", epochs=3, sampling=sampling,
                         augmentation=pipeline, engine={"k_epochs": 1, "workers": 2})
    path = write_config(tmp_path / "eval.yaml", config)
    cfg = load_task_config(path)
    found = scan_dataset(cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    plan = TaskPlan(cfg, found.videos, k_epochs=cfg.engine.k_epochs)
    videos = sorted(found.videos, key=lambda v: v.name)
    expected = [view for v in videos for view in oracle_views(v.path)]
    with mount_sandfs(tmp_path, [path]) as mounted:
        assert sorted(os.listdir(mounted.path("eval", "0")), key=int) == ["0", "1", "2"]
        for epoch in range(3):
            served, seen = [], []
            for iteration in range(3):
                view = mounted.path("eval", str(epoch), str(iteration), "view")
                with open(view, "rb") as f:
                    data = f.read()
                assert data == reference_view(plan, epoch, iteration)
                served.extend(np.load(io.BytesIO(data)))
                meta = json.loads(os.getxattr(view, "user.sand.meta"))
                seen += [(s["video"], s["test_clip"], s["test_crop"]) for s in meta["samples"]]
            assert seen == [(v.name, c, s) for v in videos for c in range(CLIPS)
                            for s in range(CROPS)]
            assert len(served) == len(expected) == 12 * CLIPS * CROPS
            for got, want in zip(served, expected, strict=True):
                np.testing.assert_array_equal(got, want)
