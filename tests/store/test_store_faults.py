"""Disk full, injected faults and kill -9: nothing partial is ever visible,
put never raises ENOSPC, and the store recovers on reopen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sandfs.cache import ObjectStore, Stack
from sandfs.cache.disk import FAKE_FREE_ENV, HEADER_NBYTES
from tests.helpers.store import BLOCK, SHAPES, key, make_array, object_files

REPO_ROOT = Path(__file__).resolve().parents[2]  # where `python -m tests.helpers...` runs

WRITE_POINTS = ["cache_write_mid", "after_write_before_rename", "after_rename_before_index"]


def no_temp_files(root: str) -> bool:
    return not any(path.endswith(".tmp") for path in object_files(root))


def test_fake_free_bytes_gives_enospc(make_store, monkeypatch):
    monkeypatch.setenv(FAKE_FREE_ENV, str(3 * BLOCK))
    store = make_store(default_fmt="raw")
    one_block = make_array(0, (BLOCK - HEADER_NBYTES,))
    assert store.put(key("frame", "big"), make_array(1, (5 * BLOCK,))) is False
    assert object_files(store.root) == []
    stored = [store.put(key("frame", i), one_block) for i in range(4)]
    assert stored == [True, True, True, False]
    assert store.stats()["enospc"] == 2 and no_temp_files(store.root)
    store.discard(key("frame", 0))  # deleting gives the space back
    assert store.put(key("frame", 3), one_block)


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_raise_at_write_points_leaves_nothing(make_store, fault, point):
    store = make_store()
    array = make_array(0, SHAPES["frame"])
    fault(f"{point}:2:raise")
    assert store.put(key("frame", 0), array)
    with pytest.raises(RuntimeError, match=f"injected fault at {point}"):
        store.put(key("frame", 1), array)
    assert store.get(key("frame", 1)) is None
    assert no_temp_files(store.root) and store.check() == []
    assert store.put(key("frame", 1), array)  # the nth hit only: a retry works
    store.close()
    reopened = ObjectStore(store.root, 1 << 20)
    assert reopened.open().objects == 2 and reopened.check() == []
    reopened.close()


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_a_stack_stopped_mid_write_leaves_nothing(make_store, fault, point):
    """Written part by part, a stack stopped at any write point leaves nothing behind."""
    store = make_store()
    frames = Stack(tuple(make_array(i, SHAPES["frame"]) for i in range(3)))
    fault(f"{point}:1:raise")
    with pytest.raises(RuntimeError, match=f"injected fault at {point}"):
        store.put(key("frame", 0), frames)
    assert store.get(key("frame", 0)) is None
    assert no_temp_files(store.root) and store.check() == []
    assert store.put(key("frame", 0), frames)
    assert np.array_equal(store.get(key("frame", 0)), frames.joined())


def test_enospc_action_is_counted_not_raised(make_store, fault):
    store = make_store()
    fault("cache_write_mid:1:enospc")
    assert store.put(key("clip", 0), make_array(0, SHAPES["clip"])) is False
    assert store.stats()["enospc"] == 1 and object_files(store.root) == []


def test_raise_mid_eviction_keeps_the_store_consistent(make_store, fault):
    store = make_store(budget_bytes=8 * BLOCK, default_fmt="raw")
    array = make_array(0, SHAPES["frame"])  # one block with its header
    for i in range(6):
        store.put(key("frame", i), array, deadline=i)
    fault("evict_mid:1:raise")
    with pytest.raises(RuntimeError, match="evict_mid"):
        store.put(key("frame", "x"), array, deadline=0)
    assert store.check() == [] and store.stats()["objects"] == 5
    assert store.put(key("frame", "y"), array, deadline=0)


def test_tmpfs_disk_full(tmp_path):
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mountpoint)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with ObjectStore(str(mountpoint / "cache"), 64 << 20, default_fmt="raw") as store:
            arrays = {key("batch", i): make_array(i, (1 << 20,)) for i in range(10)}
            stored = {k: store.put(k, array) for k, array in arrays.items()}
            assert not all(stored.values()) and store.stats()["enospc"] >= 1
            assert no_temp_files(store.root) and store.check() == []
            for object_key, array in arrays.items():
                got = store.get(object_key)
                assert (got is not None) == stored[object_key]
                assert got is None or np.array_equal(got, array)
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


CRASHES = [  # (fault spec, objects persisted, temp files left)
    ("cache_write_mid:3:kill9", 2, 1),
    ("after_write_before_rename:3:kill9", 2, 1),
    ("after_rename_before_index:3:kill9", 3, 0),
    ("evict_mid:2:kill9", None, 0),
]


@pytest.mark.parametrize(("spec", "persisted", "temps"), CRASHES)
def test_kill9_then_reopen(tmp_path, spec, persisted, temps):
    root = str(tmp_path / "cache")
    budget_bytes = 6 * BLOCK  # frames are one block: evictions from the 5th put on
    env = {**os.environ, "SANDFS_FAULT": spec}
    result = subprocess.run(
        [sys.executable, "-m", "tests.helpers.crash_writer", root, str(budget_bytes), "8"],
        env=env, cwd=REPO_ROOT, capture_output=True, check=False, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    assert sum(path.endswith(".tmp") for path in object_files(root)) == temps
    with ObjectStore(root, budget_bytes) as store:
        report = store.stats()
        assert store.check() == [] and no_temp_files(root)
        if persisted is not None:
            assert report["objects"] == persisted
        for i in range(8):  # whatever survived is whole and right
            got = store.get(key("frame", i))
            assert got is None or np.array_equal(got, make_array(i, SHAPES["frame"]))
        assert store.stats()["corrupt_detected"] == 0


def test_a_full_disk_at_close_loses_the_snapshot_only(make_store, monkeypatch):
    """The index snapshot cannot be written at close (ENOSPC): the store still closes and
    releases its directory; the next open reads the objects' headers."""
    store = make_store()
    store.put(key("frame", 1), make_array(1, (8, 8, 3)))

    def full_disk(*args) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sandfs.cache.store.save_snapshot", full_disk)
    store.close()
    monkeypatch.undo()
    again = make_store()
    assert again.get(key("frame", 1)) is not None
