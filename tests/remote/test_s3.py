"""Datasets in an S3 bucket, served by moto's S3 server on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandfs.remote import RemoteError, prepare_remote_dataset
from sandfs.remote.connect import open_store
from tests.helpers.stores import EXTENSIONS, TREE, VIDEOS, file_bytes

pytest.importorskip("s3fs")  # the remote extra
pytest.importorskip("moto.server")


def prepare(s3, cache_dir, url=None, **kwargs):
    kwargs.setdefault("manifest", None)
    return prepare_remote_dataset(url or s3.url, storage_options=s3.options,
                                  cache_dir=cache_dir, extensions=EXTENSIONS, timeout_s=5,
                                  **kwargs)


def test_listing_a_prefix_with_sub_folders(s3, cache_dir):
    copy = prepare(s3, cache_dir)
    assert [e.rel_path for e in copy.entries] == VIDEOS  # not data2/, hidden or .txt
    for rel in VIDEOS:
        assert Path(copy.root, rel).read_bytes() == file_bytes(rel, TREE[rel], 0)
    assert all(e.etag for e in copy.entries)
    assert copy.stats.bytes_fetched == sum(TREE[rel] for rel in VIDEOS)


def test_a_second_prepare_fetches_nothing(s3, cache_dir):
    prepare(s3, cache_dir)
    again = prepare(s3, cache_dir)
    assert again.stats.bytes_fetched == 0
    assert again.stats.files_reused == len(VIDEOS)


def test_a_changed_object_is_detected_by_its_etag(s3, cache_dir):
    first = prepare(s3, cache_dir)
    rel = "archery/a1.mp4"
    new = bytes(TREE[rel])  # the same size, other bytes: only the ETag tells
    s3.put(f"data/{rel}", new)
    copy = prepare(s3, cache_dir)
    assert copy.changed == (rel,)
    assert copy.stats.bytes_fetched == len(new)
    assert Path(first.root, rel).read_bytes() == new


def test_a_manifest_in_the_bucket(s3, cache_dir):
    s3.put("lists/train.txt", b"archery/a2.MP4\nbowling/deep/b1.mkv\n")
    copy = prepare(s3, cache_dir, manifest=f"s3://{s3.bucket}/lists/train.txt")
    assert [e.rel_path for e in copy.entries] == ["archery/a2.MP4", "bowling/deep/b1.mkv"]
    assert sorted(os.listdir(copy.root)) == ["archery", "bowling"]


def test_a_manifest_naming_a_missing_object_is_a_clear_error(s3, cache_dir, tmp_path):
    manifest = tmp_path / "m.txt"
    manifest.write_text("archery/a1.mp4\narchery/gone.mp4\n")
    with pytest.raises(RemoteError, match=r"archery/gone\.mp4: not found"):
        prepare(s3, cache_dir, manifest=str(manifest))


def test_a_missing_bucket_is_a_clear_error(s3, cache_dir):
    with pytest.raises(RemoteError, match="cannot list s3://no-such-bucket/x: not found"):
        prepare(s3, cache_dir, url="s3://no-such-bucket/x")


def test_an_empty_prefix_is_a_clear_error(s3, cache_dir):
    with pytest.raises(RemoteError, match=r"no files with the extensions \.mp4"):
        prepare(s3, cache_dir, url=f"s3://{s3.bucket}/nothing-here")


def test_keys_that_cannot_be_local_files_are_left_out(s3, cache_dir, caplog):
    """A key with an empty part, or one that is also a folder of other keys, cannot be a
    file of the copy: logged and left out, the rest is fetched. (Keys with '..' are left out
    by the same check, tested through a manifest: moto normalises them.)"""
    s3.put("data/twice//empty-part.mp4", b"odd")
    s3.put("data/clip.mp4", b"file")
    s3.put("data/clip.mp4/inner.mp4", b"inner")
    copy = prepare(s3, cache_dir)
    assert [e.rel_path for e in copy.entries] == sorted([*VIDEOS, "clip.mp4/inner.mp4"])
    assert "leaving out 'twice//empty-part.mp4': not a plain relative path" in caplog.text
    assert "leaving out 'clip.mp4': also the name of a folder" in caplog.text
    assert Path(copy.root, "clip.mp4/inner.mp4").read_bytes() == b"inner"


def regional_bucket(s3, region: str) -> tuple[dict, str]:
    """s3's objects copied into a bucket of `region`; the options reaching it as s3fs users
    write them: endpoint and region in client_kwargs, path-style addressing in config_kwargs."""
    bucket = f"{s3.bucket[:40]}-{region}"
    client = s3.client()
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    for rel, size in TREE.items():
        client.put_object(Bucket=bucket, Key=f"data/{rel}", Body=file_bytes(rel, size, 0))
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": region},
            "config_kwargs": {"s3": {"addressing_style": "path"}, "read_timeout": 2}}, bucket


def test_nested_options_reach_the_client_with_sandfs_bounds_merged(s3, cache_dir, caplog):
    options, bucket = regional_bucket(s3, "eu-west-1")
    caplog.set_level("INFO", logger="sandfs.remote.connect")
    copy = prepare_remote_dataset(f"s3://{bucket}/data", storage_options=options,
                                  cache_dir=cache_dir, extensions=EXTENSIONS, timeout_s=5,
                                  manifest=None)
    assert [e.rel_path for e in copy.entries] == VIDEOS
    store = open_store(f"s3://{bucket}/data", options, timeout_s=5)
    store.fs.connect()
    meta = store.fs.s3.meta
    assert meta.region_name == "eu-west-1"
    assert meta.config.s3 == {"addressing_style": "path"}
    assert (meta.config.connect_timeout, meta.config.read_timeout) == (5, 2)  # 2: the user's
    assert meta.config.retries["total_max_attempts"] == 1
    assert ("sandfs's bounds merged into storage_options: config_kwargs.connect_timeout=5; "
            "config_kwargs.retries.total_max_attempts=1") in caplog.text
