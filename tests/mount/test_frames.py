"""videos/: the source files byte-identical, decoded frames (aug0) and intermediate views."""

from __future__ import annotations

import errno
import io
import json
import os

import numpy as np
import pytest

from sandfs.media.decode import decode_all_reference
from sandfs.media.synth import read_painted_index
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.plans import build_plans
from tests.helpers.reference import reference_view


def load(path) -> np.ndarray:
    with open(path, "rb") as f:
        return np.load(io.BytesIO(f.read()))


def test_source_videos_are_byte_identical(mounted, dataset_dir):
    for rel in ("archery/archery_000.mp4", "juggling/juggling_003.mp4"):
        served = mounted.path("t0", "videos", rel)
        assert os.stat(served).st_size == (dataset_dir / rel).stat().st_size
        assert served.read_bytes() == (dataset_dir / rel).read_bytes()


def test_aug0_equals_an_independent_pyav_decode(mounted, dataset_dir):
    frames = decode_all_reference(str(dataset_dir / "bowling/bowling_001.mp4"))
    frames_dir = mounted.path("t0", "videos", "bowling", "bowling_001")
    assert os.listdir(frames_dir) == [f"frame{i}" for i in range(len(frames))]
    for index in (0, 5, len(frames) - 1):
        path = frames_dir / f"frame{index}" / "aug0"
        array = load(path)
        assert os.stat(path).st_size == len(path.read_bytes())
        assert np.array_equal(array, frames[index])
        assert read_painted_index(array) == index
    with pytest.raises(FileNotFoundError):
        os.stat(frames_dir / f"frame{len(frames)}")
    for bad in ("frame01", "frame+1", "frame", "aug0"):
        with pytest.raises(FileNotFoundError):
            os.stat(frames_dir / bad)


def test_aug_depths_follow_the_current_epochs_plan(mounted):
    view = mounted.path("t0", "0", "0", "view")
    sample = json.loads(os.getxattr(view, "user.sand.meta"))["samples"][0]
    folder, _, leaf = sample["video"].rpartition("/")
    frame_dir = mounted.path("t0", "videos", folder, leaf, f"frame{sample['frame_indices'][0]}")
    assert os.listdir(frame_dir) == ["aug0", "aug1", "aug2", "aug3"]  # resize, flip, crop
    resized, flipped, cropped = (load(frame_dir / f"aug{d}") for d in (1, 2, 3))
    assert resized.shape == (36, 48, 3) and flipped.shape == (36, 48, 3)
    assert cropped.shape == (32, 32, 3)
    if sample["flip"]:
        assert np.array_equal(flipped, resized[:, ::-1])
    else:
        assert np.array_equal(flipped, resized)
    batch = load(view)
    assert np.array_equal(batch[0, 0], cropped)  # the view is built from these very objects
    meta = json.loads(os.getxattr(frame_dir / "aug3", "user.sand.meta"))
    assert meta["depth"] == 3 and meta["shape"] == [32, 32, 3]
    with pytest.raises(FileNotFoundError):
        os.stat(frame_dir / "aug4")


def test_xattrs_of_frames_and_source_videos(mounted):
    video = mounted.path("t0", "videos", "archery", "archery_000.mp4")
    info = json.loads(os.getxattr(video, "user.sand.meta"))
    assert info["label"] == "archery" and info["label_index"] == 0
    assert json.loads(os.getxattr(video, "user.sand.labels")) == ["archery"]
    with pytest.raises(OSError) as caught:
        os.getxattr(mounted.path("t0"), "user.sand.meta")
    assert caught.value.errno == errno.ENODATA


def test_decode_resize_scales_in_the_decoder(tmp_path, dataset_dir):
    """sampling.decode_resize: frames come out of the decoder's colour conversion already at
    [H, W] (fused, no full-size RGB); the steps start from them. A task without it on the same
    mount is decoded in the same pass at full size."""
    augmentation = [
        {"name": "maybe_flip", "branch_type": "random", "inputs": ["frame"], "outputs": ["f"],
         "branches": [{"prob": 0.5, "config": [{"flip": {"direction": "horizontal"}}]},
                      {"prob": 0.5, "config": []}]},
        {"name": "crop", "branch_type": "single", "inputs": ["f"], "outputs": ["c"],
         "config": [{"random_crop": {"size": [32, 32]}}]},
    ]
    fused = task_config(dataset_dir, task="fused", augmentation=augmentation,
                        sampling={"decode_resize": {"shape": [36, 48], "interpolation": "area"}})
    paths = [write_config(tmp_path / "fused.yaml", fused),
             write_config(tmp_path / "plain.yaml", task_config(dataset_dir, task="plain"))]
    plans = build_plans(paths)
    with mount_sandfs(tmp_path, paths) as m:
        for name, plan in plans.items():
            for iteration in range(plan.iterations_per_epoch):
                view = m.path(name, "0", str(iteration), "view")
                assert view.read_bytes() == reference_view(plan, 0, iteration), (name, iteration)
        sample = json.loads(os.getxattr(m.path("fused", "0", "0", "view"),
                                        "user.sand.meta"))["samples"][0]
        x, y, w, h = sample["crop"]  # in source pixels: 64x48 frames decoded at 48x36
        assert x >= 0 and y >= 0 and x + w <= 64 and y + h <= 48
        assert 42 <= w <= 43 and 42 <= h <= 43  # 32 px at 48/64 scale, edges rounded
        folder, _, leaf = sample["video"].rpartition("/")
        frame_dir = m.path("fused", "videos", folder, leaf, f"frame{sample['frame_indices'][0]}")
        assert load(frame_dir / "aug0").shape == (48, 64, 3)  # aug0: the decoded frame
        assert load(frame_dir / "aug1").shape == (36, 48, 3)  # steps start at decode size
        assert load(frame_dir / "aug2").shape == (32, 32, 3)
