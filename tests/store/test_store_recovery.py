"""Restart: objects found again, the index rebuilt from headers, leftovers swept."""

from __future__ import annotations

import os
import struct
import time

import numpy as np
import pytest

from sandfs.cache import CacheDirError, ObjectStore, StoreBusyError
from sandfs.cache.disk import MAGIC
from sandfs.cache.recovery import INDEX_FILE
from tests.helpers.store import BLOCK, key, make_array, object_files


def fill(store: ObjectStore, count: int, kind: str = "frame") -> dict:
    arrays = {key(kind, i): make_array(i, (8, 8, 3)) for i in range(count)}
    for object_key, array in arrays.items():
        assert store.put(object_key, array, fmt="lz4" if kind == "aug" else None)
    return arrays


def assert_all_there(store: ObjectStore, arrays: dict) -> None:
    for object_key, array in arrays.items():
        assert np.array_equal(store.get(object_key), array)


def test_reopen_loads_the_snapshot(make_store):
    store = make_store()
    arrays = fill(store, 5) | fill(store, 3, "aug")
    used = store.stats()["bytes_used"]
    store.close()
    store = make_store()
    report = store.stats()
    assert (report["objects"], report["bytes_used"]) == (8, used)
    assert report["bytes_by_format"].keys() == {"raw", "lz4"}
    assert not os.path.exists(os.path.join(store.root, INDEX_FILE))  # a crash now rescans
    assert_all_there(store, arrays)


def test_reopen_without_the_index_scans_headers(make_store, tmp_path):
    store = make_store()
    arrays = fill(store, 5)
    store.close()
    os.unlink(os.path.join(store.root, INDEX_FILE))
    reopened = ObjectStore(store.root, 1 << 20)
    report = reopened.open()
    assert not report.index_loaded and report.objects == 5
    assert_all_there(reopened, arrays)
    assert reopened.check() == []
    reopened.close()


def test_a_corrupt_snapshot_is_ignored(make_store):
    store = make_store()
    arrays = fill(store, 3)
    store.close()
    with open(os.path.join(store.root, INDEX_FILE), "r+b") as file:
        file.seek(40)
        file.write(b"#")
    reopened = ObjectStore(store.root, 1 << 20)
    assert not reopened.open().index_loaded
    assert_all_there(reopened, arrays)
    reopened.close()


def test_startup_sweep(make_store):
    store = make_store()
    arrays = fill(store, 4)
    store.close()
    object_dir = os.path.dirname(object_files(store.root)[0])
    leftovers = [os.path.join(object_dir, "frame-" + "0" * 64 + ".obj.123-0.tmp"),
                 os.path.join(store.root, "objects", "stray.txt")]
    for path in leftovers:
        with open(path, "wb") as file:
            file.write(b"partial")
    stale = store.disk.path_for(key("clip", "old"))
    os.makedirs(os.path.dirname(stale), exist_ok=True)
    with open(stale, "wb") as file:  # a valid magic, another format version
        file.write(MAGIC + struct.pack("<B", 99) + bytes(200))
    reopened = ObjectStore(store.root, 1 << 20)
    report = reopened.open()
    assert (report.temp_removed, report.foreign_removed, report.stale_removed) == (1, 1, 1)
    assert report.objects == 4 and report.corrupt_removed == 0
    assert not any(os.path.exists(path) for path in [*leftovers, stale])
    assert_all_there(reopened, arrays)
    assert reopened.check() == []
    reopened.close()


def test_deleted_objects_with_the_index_kept_are_misses(make_store):
    store = make_store()
    arrays = fill(store, 4)
    store.close()
    gone = list(arrays)[:2]
    for object_key in gone:
        os.unlink(store.disk.path_for(object_key))
    reopened = ObjectStore(store.root, 1 << 20)
    report = reopened.open()
    assert report.index_loaded and report.missing == 2 and report.objects == 2
    assert all(reopened.get(object_key) is None for object_key in gone)
    assert reopened.check() == []
    reopened.close()


def test_deleted_while_open_is_a_miss(make_store):
    store = make_store()
    arrays = fill(store, 2)
    object_key = next(iter(arrays))
    os.unlink(store.disk.path_for(object_key))
    assert store.get(object_key) is None and object_key not in store
    assert store.stats()["corrupt_detected"] == 0


def test_a_smaller_budget_evicts_at_open(make_store):
    store = make_store()
    fill(store, 10)
    store.close()
    smaller = ObjectStore(store.root, 4 * BLOCK)
    report = smaller.open()
    assert report.evicted_over_budget == 6 and report.bytes_used == 4 * BLOCK
    assert smaller.check() == []
    smaller.close()


def test_one_process_at_a_time(make_store):
    store = make_store()
    with pytest.raises(StoreBusyError, match="in use by another sandfs process"):
        ObjectStore(store.root, 1 << 20).open()


def test_unsafe_cache_dir_is_refused(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(CacheDirError, match="world-writable"):
        ObjectStore(str(root), 1 << 20).open()


@pytest.mark.parametrize("with_index", [True, False])
def test_ten_thousand_objects_reopen_fast(tmp_path, with_index):
    root = str(tmp_path / "cache")
    with ObjectStore(root, 1 << 30) as store:
        array = make_array(0, (4, 4, 3))
        for i in range(10_000):
            assert store.put(key("frame", i), array, fmt="raw")
    if not with_index:
        os.unlink(os.path.join(root, INDEX_FILE))
    start = time.perf_counter()
    with ObjectStore(root, 1 << 30) as store:
        assert store.stats()["objects"] == 10_000
        seconds = time.perf_counter() - start
        assert store.check() == []
    assert seconds < 10
