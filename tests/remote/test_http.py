"""Datasets served by Python's http.server (an HTML directory listing) on loopback."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from sandfs.media.scan import scan_dataset
from sandfs.remote import RemoteError, log_progress, prepare_remote_dataset
from tests.helpers.stores import EXTENSIONS, TREE, VIDEOS, http_store

pytest.importorskip("fsspec")  # the remote extra
pytest.importorskip("aiohttp")


def prepare(url, cache_dir, **kwargs):
    kwargs.setdefault("storage_options", None)
    kwargs.setdefault("manifest", None)
    return prepare_remote_dataset(url, cache_dir=cache_dir, extensions=EXTENSIONS,
                                  timeout_s=5, **kwargs)


def local_files(root: str) -> dict[str, bytes]:
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = Path(path).read_bytes()
    return found


def test_listing_follows_sub_folders_and_fetches_byte_identical_videos(http, tree, cache_dir):
    copy = prepare(http.url, cache_dir)
    assert [e.rel_path for e in copy.entries] == VIDEOS  # hidden and .txt left out
    assert local_files(copy.root) == {rel: (tree / rel).read_bytes() for rel in VIDEOS}
    assert copy.root.startswith(os.path.join(cache_dir, "remote"))
    assert copy.bytes_on_disk == sum(TREE[rel] for rel in VIDEOS)
    assert copy.stats.bytes_fetched == copy.bytes_on_disk
    assert copy.stats.files_fetched == len(VIDEOS)
    assert copy.stats.errors == copy.stats.retries == 0
    assert not os.path.exists(copy.root + ".tmp")  # no temp files left


def test_a_second_prepare_fetches_nothing(http, cache_dir):
    first = prepare(http.url, cache_dir)
    mtimes = {rel: os.stat(os.path.join(first.root, rel)).st_mtime_ns for rel in VIDEOS}
    second = prepare(http.url, cache_dir)
    assert second.root == first.root
    assert second.stats.bytes_fetched == 0
    assert second.stats.files_fetched == 0
    assert second.stats.files_reused == len(VIDEOS)
    assert {rel: os.stat(os.path.join(second.root, rel)).st_mtime_ns for rel in VIDEOS} == mtimes


def test_a_changed_remote_file_is_detected_and_fetched_again(http, tree, cache_dir):
    first = prepare(http.url, cache_dir)
    (tree / "archery/a1.mp4").write_bytes(b"new content")  # another size
    same_size = tree / "bowling/deep/b1.mkv"
    same_size.write_bytes(bytes(TREE["bowling/deep/b1.mkv"]))
    os.utime(same_size, (1_600_000_000, 1_600_000_000))  # another Last-Modified
    copy = prepare(http.url, cache_dir)
    assert copy.changed == ("archery/a1.mp4", "bowling/deep/b1.mkv")
    assert copy.stats.files_changed == 2
    assert copy.stats.files_fetched == 2
    assert copy.stats.bytes_fetched == len(b"new content") + TREE["bowling/deep/b1.mkv"]
    assert Path(first.root, "archery/a1.mp4").read_bytes() == b"new content"
    assert Path(first.root, "bowling/deep/b1.mkv").read_bytes() == same_size.read_bytes()


def test_a_file_deleted_on_the_store_leaves_the_copy(http, tree, cache_dir):
    prepare(http.url, cache_dir)
    (tree / "bowling/deep/b1.mkv").unlink()
    copy = prepare(http.url, cache_dir)
    assert [e.rel_path for e in copy.entries] == [v for v in VIDEOS if "b1" not in v]
    assert sorted(local_files(copy.root)) == [e.rel_path for e in copy.entries]
    assert not os.path.exists(os.path.join(copy.root, "bowling/deep"))


def test_a_file_tampered_with_in_the_cache_is_fetched_again(http, tree, cache_dir):
    copy = prepare(http.url, cache_dir)
    Path(copy.root, "archery/a1.mp4").write_bytes(b"truncated")
    again = prepare(http.url, cache_dir)
    assert again.stats.files_fetched == 1
    assert Path(copy.root, "archery/a1.mp4").read_bytes() == (tree / "archery/a1.mp4").read_bytes()


def test_a_local_manifest_selects_files_without_listing(http, tree, tmp_path, cache_dir):
    manifest = tmp_path / "list.txt"
    manifest.write_text("# two of them\n\narchery/a1.mp4\n./bowling/b 2.webm\nnotes.txt\n")
    (tree / "index.html").write_text("<html>listing forbidden</html>")  # no links to follow
    copy = prepare(http.url, cache_dir, manifest=str(manifest))
    assert [e.rel_path for e in copy.entries] == ["archery/a1.mp4", "bowling/b 2.webm"]
    assert sorted(local_files(copy.root)) == ["archery/a1.mp4", "bowling/b 2.webm"]


def test_a_manifest_on_the_store(http, tree, cache_dir):
    (tree / "videos.txt").write_text("bowling/deep/b1.mkv\n")
    copy = prepare(http.url, cache_dir, manifest=http.url + "videos.txt")
    assert [e.rel_path for e in copy.entries] == ["bowling/deep/b1.mkv"]


def test_a_copy_scans_as_the_original_with_labels_by_folder(dataset_dir, cache_dir):
    """The fetched folder gives the scan the same videos, names and folders (labels)."""
    with http_store(dataset_dir) as store:
        copy = prepare(store.url, cache_dir)
    local = scan_dataset(dataset_dir, EXTENSIONS, workers=1)
    fetched = scan_dataset(copy.root, EXTENSIONS, workers=1)
    assert [v.rel_path for v in fetched.videos] == [v.rel_path for v in local.videos]
    assert [(v.num_frames, v.size_bytes) for v in fetched.videos] == \
        [(v.num_frames, v.size_bytes) for v in local.videos]
    assert {v.rel_path.split("/")[0] for v in fetched.videos} == {"archery", "bowling",
                                                                  "juggling"}


def test_progress_is_reported_per_fetched_file(http, cache_dir, caplog):
    seen = []
    logged = log_progress(http.url, every_s=3600)

    def progress(state):
        seen.append(state)
        logged(state)

    with caplog.at_level(logging.INFO, logger="sandfs.remote"):
        copy = prepare(http.url, cache_dir, progress=progress)
    assert [s.files_done for s in seen] == list(range(1, len(VIDEOS) + 1))
    assert seen[-1].bytes_done == seen[-1].bytes_total == copy.bytes_on_disk
    assert f"fetched {len(VIDEOS)} of {len(VIDEOS)} files" in caplog.text


@pytest.mark.parametrize(("line", "problem"), [
    ("../escape.mp4", "not a plain relative path"),
    ("a/../../escape.mp4", "not a plain relative path"),
    ("/etc/passwd.mp4", "not a plain relative path"),
    ("a//b.mp4", "not a plain relative path"),
])
def test_a_manifest_line_that_escapes_the_dataset_is_an_error(http, tmp_path, cache_dir, line,
                                                              problem):
    manifest = tmp_path / "list.txt"
    manifest.write_text(f"archery/a1.mp4\n{line}\n")
    with pytest.raises(RemoteError, match=f"list.txt:2: .*{problem}"):
        prepare(http.url, cache_dir, manifest=str(manifest))
    assert not (tmp_path / "escape.mp4").exists()


def test_a_manifest_listing_a_path_twice_is_an_error(http, tmp_path, cache_dir):
    manifest = tmp_path / "list.txt"
    manifest.write_text("archery/a1.mp4\n# again\narchery/a1.mp4\n")
    message = "list.txt:3: 'archery/a1.mp4' is listed already on line 1"
    with pytest.raises(RemoteError, match=re.escape(message)):
        prepare(http.url, cache_dir, manifest=str(manifest))
