"""A fetched copy mounted as the daemon will mount it once wired (the copy's folder in place of
the URL): source videos pass through byte-identical and labels come from the remote folders."""

from __future__ import annotations

import json
import os

import pytest

from sandfs.remote import RemoteSpec, prepare_remote_datasets
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.stores import http_store

pytest.importorskip("fsspec")  # the remote extra
pytest.importorskip("aiohttp")


def test_a_fetched_dataset_is_served_like_the_local_one(dataset_dir, tmp_path):
    cache_dir = tmp_path / "mnt-cache"  # the harness mounts with this cache dir
    cache_dir.mkdir(mode=0o700)
    with http_store(dataset_dir) as store:
        spec = RemoteSpec.of(store.url, None, None, (".mp4",))
        copies = prepare_remote_datasets([spec], cache_dir=str(cache_dir), budget_bytes=None)
    config = write_config(tmp_path / "task.yaml", task_config(copies.root(spec)))
    with mount_sandfs(tmp_path, [config]) as mounted:
        videos = sorted(p.relative_to(dataset_dir) for p in dataset_dir.rglob("*.mp4"))
        for rel in videos:
            served = mounted.path("t0", "videos", str(rel))
            assert served.read_bytes() == (dataset_dir / rel).read_bytes()
        view = mounted.path("t0", "0", "0", "view")
        meta = json.loads(os.getxattr(view, "user.sand.meta"))
        labels = {s["video"]: s["label"] for s in meta["samples"]}
        assert labels and all(video.split("/")[0] == label for video, label in labels.items())
        assert len(view.read_bytes()) == view.stat().st_size
