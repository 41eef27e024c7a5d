"""Shared fixtures: a small painted-video dataset (made once per session), task configs, and a
real loopback mount (see helpers/harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfs.media.synth import make_dataset
from tests.helpers.harness import Mounted, mount_sandfs, task_config, write_config

DATASET_CLASSES = ["archery", "bowling", "juggling"]
DATASET_VIDEOS_PER_CLASS = 4


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    """12 painted H.264 videos (3 classes), 64x48, 24..40 frames, GOP 12; each frame shows its
    own index in its pixels (`read_painted_index`)."""
    root = tmp_path_factory.mktemp("dataset") / "videos"
    make_dataset(root, classes=DATASET_CLASSES, videos_per_class=DATASET_VIDEOS_PER_CLASS,
                 num_frames=(24, 40), size=(64, 48), seed=1, gop=12)
    return root


@pytest.fixture
def config_path(tmp_path, dataset_dir) -> Path:
    return write_config(tmp_path / "task.yaml", task_config(dataset_dir))


@pytest.fixture
def mounted(tmp_path, config_path) -> Mounted:
    with mount_sandfs(tmp_path, [config_path]) as m:
        yield m
