"""The peer loaders of bench_e2e make the batches sandfs serves: same frames, same crops and
flips, same order and shape (equal within each peer's stated tolerance), on a dataset mixing
the codecs the benchmark uses. A peer that is not installed is skipped with the reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from common import MixedDatasetSpec, VideoKind
from peers import (
    EXACT,
    PEERS,
    SCALED,
    PeerFeed,
    check_peer,
    decode_pyav,
    peer_unavailable,
    task_plans,
)

from tests.helpers.harness import mount_sandfs
from tests.helpers.reference import reference_array

SMALL_KINDS = (VideoKind("libx264", ".mp4", 160, 90, bframes=3),
               VideoKind("libvpx-vp9", ".webm", 96, 64),
               VideoKind("mpeg4", ".mp4", 128, 72, bframes=2),
               VideoKind("libx265", ".mp4", 112, 64, bframes=3))
K_EPOCHS = 2


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixed") / "videos"
    MixedDatasetSpec(classes=2, videos_per_class=4, kinds=SMALL_KINDS, seconds=(2, 3),
                     gop_frames=25).write(root)
    return root


def config(dataset: Path, task: str = "clips") -> dict:
    """Two clips per video (so the view's order of videos and samples is exercised), the
    short side to 64, random crop, flip."""
    def step(name, inputs, outputs, op):
        return {"name": name, "branch_type": "single", "inputs": inputs, "outputs": outputs,
                "config": [op]}

    return {"task": task, "seed": 3, "epochs": 3,
            "dataset": {"tag": "train", "input_source": "file",
                        "video_dataset_path": str(dataset), "extensions": [".mp4", ".webm"],
                        "labels": "dirname",
                        "sampling": {"videos_per_batch": 3, "frames_per_video": 6,
                                     "frame_stride": 3, "samples_per_video": 2,
                                     "drop_last": False},
                        "augmentation": [
                            step("resize", ["frame"], ["r"],
                                 {"resize": {"size": 64, "interpolation": "bilinear"}}),
                            step("crop", ["r"], ["c"], {"random_crop": {"size": [48, 56]}}),
                            step("flip", ["c"], ["f"],
                                 {"flip": {"direction": "horizontal", "p": 0.5}})]}}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory, mixed_dataset) -> Path:
    path = tmp_path_factory.mktemp("configs") / "clips.yaml"
    path.write_text(yaml.safe_dump(config(mixed_dataset), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def plan(config_path):
    return task_plans([config_path], k_epochs=K_EPOCHS, workers=2)["clips"]


def require(name: str) -> None:
    reason = peer_unavailable(name)
    if reason:
        pytest.skip(f"peer {name}: {reason}")


# every batch of two epochs in two windows: each video and codec, first and last frames
BATCHES = [(epoch, iteration) for epoch in (0, 2) for iteration in range(3)]


def batches_without(plan, codec: str) -> list[tuple[int, int]]:
    return [(e, i) for e in (0, 1, 2) for i in range(plan.iterations_per_epoch)
            if all(plan.videos[v].codec != codec for v in plan.batch_videos(e, i))]


DECORD_MPEG4 = ("decord 0.6 returns frames 2 later on MPEG-4 part 2 with B-frames (found by "
                "this check; sequential reads are right)")


@pytest.mark.parametrize("name", [
    *(n for n in PEERS if n != "decord"),
    # not strict: decord's offset did not show once in a loaded suite run (its decoder threads)
    pytest.param("decord", marks=pytest.mark.xfail(strict=False, reason=DECORD_MPEG4))])
def test_peer_makes_the_sandfs_batches(name, plan):
    require(name)
    check = check_peer(PEERS[name], plan, lambda e, i: reference_array(plan, e, i), BATCHES)
    assert check.ok, "\n".join(check.problems)
    assert check.batches == len(BATCHES)


def test_decord_is_exact_on_the_other_codecs(plan):
    require("decord")
    batches = batches_without(plan, "mpeg4")
    assert len(batches) >= 2
    check = check_peer(PEERS["decord"], plan, lambda e, i: reference_array(plan, e, i), batches)
    assert check.ok, "\n".join(check.problems)


def next_frames(info, indices, size):
    """PyAV's frames one later than asked (the video's last frame stays itself)."""
    frames = decode_pyav(info, sorted({*indices, *(min(i + 1, info.num_frames - 1)
                                                   for i in indices)}), size)
    return {i: frames[min(i + 1, info.num_frames - 1)] for i in indices}


@pytest.mark.parametrize("tolerance", [EXACT, SCALED])
def test_the_check_sees_frames_off_by_one(plan, tolerance):
    """Even the decoder-resize tolerance fails a peer that returns the next frames."""
    require("pyav")
    off = replace(PEERS["pyav"], name="off-by-one", decode=next_frames, tolerance=tolerance)
    check = check_peer(off, plan, lambda e, i: reference_array(plan, e, i), [(0, 0), (0, 1)])
    assert not check.ok
    assert len(check.problems) == 2
    assert check.mean_abs_diff > SCALED.mean_abs


def test_a_decoder_error_is_a_failed_check(plan):
    def broken(info, indices, size):
        raise RuntimeError(f"cannot decode {info.rel_path}")

    peer = replace(PEERS["pyav"], name="broken", decode=broken)
    check = check_peer(peer, plan, lambda e, i: reference_array(plan, e, i), [(0, 0)])
    assert not check.ok
    assert "RuntimeError: cannot decode" in check.problems[0]


def test_pyav_feed_equals_the_mounted_views(tmp_path, config_path, plan):
    """Through its DataLoader (2 workers), the PyAV peer yields exactly the views and labels
    a real mount serves, epoch after epoch."""
    import json
    import os

    require("pyav")
    feed = PeerFeed(plan, PEERS["pyav"], workers=2)
    with mount_sandfs(tmp_path, [config_path], extra_args=["--k-epochs", str(K_EPOCHS)]) as m:
        for epoch in range(2):
            for iteration, (clips, labels) in enumerate(feed.epoch(epoch)):
                path = m.path("clips", str(epoch), str(iteration), "view")
                view = np.load(path)
                meta = json.loads(os.getxattr(path, "user.sand.meta"))
                np.testing.assert_array_equal(clips, view)
                assert labels == [s["label_index"] for s in meta["samples"]]
            assert iteration == plan.iterations_per_epoch - 1
