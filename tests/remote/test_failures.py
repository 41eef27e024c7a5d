"""A store that is down, hangs, drops connections or dies mid-fetch: retries, then one clear
error within a bounded time, and never a partial file in the copy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandfs.remote import RemoteError, RetryPolicy, prepare_remote_dataset
from sandfs.remote.connect import open_store
from sandfs.remote.fetch import Fetcher
from tests.helpers.stores import EXTENSIONS, TREE, VIDEOS, free_port, http_store

pytest.importorskip("fsspec")  # the remote extra
pytest.importorskip("aiohttp")

FAST = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=0.2)


def prepare(url, cache_dir, **kwargs):
    kwargs.setdefault("timeout_s", 2)
    kwargs.setdefault("retry", FAST)
    return prepare_remote_dataset(url, storage_options=kwargs.pop("storage_options", None),
                                  manifest=None, cache_dir=cache_dir, extensions=EXTENSIONS,
                                  **kwargs)


def copy_files(cache_dir: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(os.path.join(cache_dir, "remote"))
            for f in files if not f.endswith((".journal", ".lock"))]


def test_an_unreachable_http_store_fails_at_once_with_one_line(cache_dir):
    url = f"http://127.0.0.1:{free_port()}/data/"
    started = time.monotonic()
    with pytest.raises(RemoteError) as caught:
        prepare(url, cache_dir)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot list {url}")
    assert "(after 3 attempts)" in message


def test_an_unreachable_s3_endpoint_fails_with_one_line(cache_dir):
    pytest.importorskip("s3fs")
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "key": "k", "secret": "s"}
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"cannot list s3://bucket/x: .*after 3 attempts"):
        prepare("s3://bucket/x", cache_dir, storage_options=options)
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("protocol", ["http", "s3"])
def test_a_store_that_never_answers_times_out(cache_dir, protocol):
    """A port that accepts connections and says nothing: each try waits `timeout_s`."""
    if protocol == "s3":
        pytest.importorskip("s3fs")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        url, options = ((f"{endpoint}/", None) if protocol == "http" else
                        ("s3://bucket/x", {"endpoint_url": endpoint, "key": "k", "secret": "s"}))
        started = time.monotonic()
        with pytest.raises(RemoteError, match=r"timed out \(after 3 attempts\)"):
            prepare(url, cache_dir, timeout_s=1, storage_options=options)
        elapsed = time.monotonic() - started
    assert 3 <= elapsed < 3 * 1 + 10


def test_dropped_connections_are_retried(tree, cache_dir):
    """The first GET of every file is cut after 1000 bytes; the retry gets it all."""
    with http_store(tree, "--cut-first", "1000") as store:
        copy = prepare(store.url, cache_dir)
    assert copy.stats.retries >= len(VIDEOS)
    assert copy.stats.errors == copy.stats.retries
    assert copy.stats.files_changed == 0
    for rel in VIDEOS:
        assert Path(copy.root, rel).read_bytes() == (tree / rel).read_bytes()


def test_a_store_dying_mid_fetch_leaves_no_partial_file(tree, cache_dir):
    with http_store(tree, "--die-after", "700") as store:
        started = time.monotonic()
        with pytest.raises(RemoteError, match=r"cannot fetch http://.*after 3 attempts"):
            prepare(store.url, cache_dir, workers=1)
        assert time.monotonic() - started < 20
        assert store.process.wait(timeout=5) == 1  # it did die
    assert copy_files(cache_dir) == []


def test_a_remount_after_a_failed_fetch_resumes(tree, cache_dir):
    """The store dies on the second file (larger than 4000 bytes); the first stays fetched and
    a prepare against the restarted store fetches only the rest."""
    port = free_port()
    with http_store(tree, "--die-after", "4000", port=port) as store, \
            pytest.raises(RemoteError, match=r"a2\.MP4"):
        prepare(store.url, cache_dir, workers=1)
    assert [os.path.basename(p) for p in copy_files(cache_dir)] == ["a1.mp4"]
    with http_store(tree, port=port) as store:
        again = prepare(store.url, cache_dir)
    assert again.stats.files_reused == 1
    assert again.stats.files_fetched == len(VIDEOS) - 1
    assert again.stats.bytes_fetched == sum(TREE[rel] for rel in VIDEOS[1:])


def test_a_file_changed_between_listing_and_fetch_is_detected(http, tree, cache_dir):
    store = open_store(http.url.rstrip("/"), {}, timeout_s=5)
    fetcher = Fetcher(store, FAST)
    rel = "archery/a1.mp4"
    listed = fetcher.info(store.path_of(rel), rel)
    (tree / rel).write_bytes(b"replaced after the listing")
    temp = Path(cache_dir, "tmp")
    temp.mkdir()
    got = fetcher.fetch(listed, os.path.join(cache_dir, "copy", rel), str(temp))
    assert got.size_bytes == len(b"replaced after the listing") != listed.size_bytes
    assert fetcher.stats().files_changed == 1
    assert Path(cache_dir, "copy", rel).read_bytes() == b"replaced after the listing"
    assert list(temp.iterdir()) == []


def test_a_dataset_over_the_storage_budget_is_refused(http, cache_dir):
    total = sum(TREE[rel] for rel in VIDEOS)
    with pytest.raises(RemoteError, match=f"the dataset is {total} bytes, more than the storage"):
        prepare(http.url, cache_dir, budget_bytes=total - 1)
    assert copy_files(cache_dir) == []


def test_copies_of_other_datasets_make_room_oldest_first(http, tree, tmp_path, cache_dir):
    total = sum(TREE[rel] for rel in VIDEOS)
    old = prepare(http.url, cache_dir)
    other_tree = tmp_path / "other"
    (other_tree / "c").mkdir(parents=True)
    (other_tree / "c/v.mp4").write_bytes(b"x" * 100)
    with http_store(other_tree) as other:
        kept = prepare(other.url, cache_dir, budget_bytes=total, keep=[old.digest])
        assert os.path.isdir(old.root)  # kept: the mount uses it too
        prepare(other.url, cache_dir, budget_bytes=total)
    assert not os.path.exists(old.root)
    assert os.path.isdir(kept.root)


def test_without_the_remote_extra_a_url_says_what_to_install(tmp_path):
    code = (
        "import sys; sys.modules['fsspec'] = None\n"
        "from sandfs.remote import prepare_remote_dataset, RemoteError\n"
        "try:\n"
        f"    prepare_remote_dataset('s3://b/p', storage_options={{}}, manifest=None,\n"
        f"        cache_dir={str(tmp_path)!r}, extensions=('.mp4',))\n"
        "except RemoteError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "pip install 'sandfs-views[remote]'" in done.stdout, done.stderr
