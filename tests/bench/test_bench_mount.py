"""The benchmarks' own mount (benchmarks/common.py): timed to the moment the daemon says it
serves, as `sandfs mount` returns to a user, and never left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from common import REPO_ROOT, MixedDatasetSpec, VideoKind, checkout_env, sandfs_mount

from sandfs.launch import sandfs_argv
from tests.helpers.mountwatch import is_mounted

H264 = VideoKind("libx264", ".mp4", 96, 64)


def task_config(dataset: Path, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "task": "clips", "seed": 0, "epochs": 1,
        "dataset": {"tag": "train", "input_source": "file", "video_dataset_path": str(dataset),
                    "extensions": [".mp4"], "labels": "dirname",
                    "sampling": {"videos_per_batch": 2, "frames_per_video": 4,
                                 "frame_stride": 2, "samples_per_video": 1},
                    "augmentation": [{"name": "crop", "branch_type": "single",
                                      "inputs": ["frame"], "outputs": ["small"],
                                      "config": [{"random_crop": {"size": [32, 32]}}]}]}}))
    return path


def test_the_mount_is_timed_to_its_readiness_and_always_released(tmp_path):
    dataset = tmp_path / "videos"
    MixedDatasetSpec(classes=1, videos_per_class=2, kinds=(H264,), seconds=(1, 1),
                     gop_frames=25).write(dataset)
    config = task_config(dataset, tmp_path / "clips.yaml")
    with sandfs_mount(tmp_path, [config], k_epochs=1, workers=1) as mount:
        assert 0 < mount.mount_s < 60
        assert mount.status()["pid"] == mount.pid  # it serves as soon as it said so
        assert np.load(mount.mountpoint / "clips" / "0" / "0" / "view").shape[0] == 2
    assert not is_mounted(mount.mountpoint)


def test_a_daemon_that_cannot_serve_fails_with_its_log(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    config = task_config(empty, tmp_path / "clips.yaml")
    with (pytest.raises(RuntimeError, match="sandfs did not serve") as failed,
          sandfs_mount(tmp_path, [config], k_epochs=1, workers=1)):
        pass
    assert "no usable videos" in str(failed.value).lower()
    assert not is_mounted(tmp_path / "mnt")


def test_the_daemon_runs_the_sandfs_of_the_benchmark_s_checkout(tmp_path, monkeypatch):
    """A benchmark run from a checkout that is not the installed sandfs (a worktree measured
    beside main) starts its daemon from that checkout, whatever else is on the path."""
    other = tmp_path / "other" / "sandfs"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(other.parent))
    argv = [*sandfs_argv()[:2], "-c", "import sandfs; print(sandfs.__file__)"]  # as `-P -m`
    found = subprocess.run(argv, env=checkout_env(), cwd=tmp_path, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert found == str(REPO_ROOT / "sandfs" / "__init__.py")
