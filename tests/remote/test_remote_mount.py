"""Remote datasets through the real daemon: `sandfs mount` with an http:// or s3:// dataset
serves the views the same files give from a local folder, fetches each video once and nothing
again on a remount with the same cache dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.stores import http_store

pytest.importorskip("fsspec")  # the remote extra
pytest.importorskip("aiohttp")

EPOCHS = 3


def every_view(mounted) -> dict[tuple[int, int], bytes]:
    return {(epoch, int(it.name)): (it / "view").read_bytes()
            for epoch in range(EPOCHS) for it in mounted.path("t0", str(epoch)).iterdir()}


def remote_figures(mounted) -> dict:
    return json.loads(mounted.path(".sand", "status.json").read_bytes())["remote"]


def dataset_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.mp4"))


def mount_views(tmp_path: Path, dataset: str, name: str, **dataset_keys) -> tuple[dict, dict]:
    config = task_config(Path("unused"), epochs=EPOCHS)
    config["dataset"] |= {"video_dataset_path": dataset, **dataset_keys}
    path = write_config(tmp_path / f"{name}.yaml", config)
    with mount_sandfs(tmp_path, [path], name=name) as mounted:
        return every_view(mounted), remote_figures(mounted)


@pytest.fixture(scope="module")
def local_views(dataset_dir, tmp_path_factory) -> dict:
    views, remote = mount_views(tmp_path_factory.mktemp("local"), str(dataset_dir), "local")
    assert remote["bytes_fetched"] == 0 and remote["requests"] == 0
    return views


def test_an_http_dataset_gives_the_local_views_and_is_fetched_once(dataset_dir, local_views,
                                                                     tmp_path):
    size = dataset_bytes(dataset_dir)
    with http_store(dataset_dir) as store:
        views, first = mount_views(tmp_path, store.url, "http")
        again, second = mount_views(tmp_path, store.url, "http")  # same cache dir
    assert views == local_views  # every view of 3 epochs, byte for byte
    assert again == local_views
    assert size <= first["bytes_fetched"] <= 1.05 * size
    assert second["bytes_fetched"] <= 0.05 * size
    assert first["errors"] == second["errors"] == 0


def test_an_s3_dataset_gives_the_local_views(dataset_dir, local_views, s3, tmp_path):
    for path in dataset_dir.rglob("*.mp4"):
        s3.put(f"videos/{path.relative_to(dataset_dir)}", path.read_bytes())
    url = f"s3://{s3.bucket}/videos"
    views, first = mount_views(tmp_path, url, "s3", storage_options=s3.options)
    assert views == local_views
    size = dataset_bytes(dataset_dir)
    assert size <= first["bytes_fetched"] <= 1.05 * size


def test_an_s3_dataset_with_a_region_and_path_style_as_fsspec_users_write_them(
        dataset_dir, local_views, s3, tmp_path):
    """storage_options with the endpoint and a region in client_kwargs and path-style
    addressing in config_kwargs: the mount serves the local views, and its log says which of
    sandfs's bounds it merged in."""
    region = "eu-central-1"
    bucket = f"{s3.bucket[:40]}-{region}"
    client = s3.client()
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    for path in dataset_dir.rglob("*.mp4"):
        client.put_object(Bucket=bucket, Key=f"videos/{path.relative_to(dataset_dir)}",
                          Body=path.read_bytes())
    options = {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": region},
               "config_kwargs": {"s3": {"addressing_style": "path"}}}
    config = task_config(Path("unused"), epochs=EPOCHS)
    config["dataset"] |= {"video_dataset_path": f"s3://{bucket}/videos",
                          "storage_options": options}
    path = write_config(tmp_path / "regional.yaml", config)
    with mount_sandfs(tmp_path, [path], name="regional") as mounted:
        assert every_view(mounted) == local_views
        log = mounted.log_text()
    assert ("sandfs's bounds merged into storage_options: config_kwargs.connect_timeout="
            in log)


def test_an_unreachable_store_is_one_line_and_exit_1(tmp_path, dataset_dir):
    import subprocess
    import sys
    import time

    from tests.helpers.stores import free_port

    config = task_config(dataset_dir)
    config["dataset"]["video_dataset_path"] = f"http://127.0.0.1:{free_port()}/videos/"
    path = write_config(tmp_path / "task.yaml", config)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "sandfs", "mount", str(tmp_path / "mnt"),
                           "--config", str(path), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert time.monotonic() - started < 60
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1" in lines[0], done.stderr
