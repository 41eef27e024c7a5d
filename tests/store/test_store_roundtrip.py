"""put/get round trips for every format, kind and dtype; keys, placement, permissions, stats."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from sandfs.cache import CODECS, ObjectKey, Stack, choose_format
from sandfs.cache.disk import HEADER_NBYTES
from tests.helpers.store import SHAPES, key, make_array, object_files

STATS_KEYS = {"bytes_used", "budget_bytes", "objects", "hits", "misses", "evictions",
              "recomputed", "corrupt_detected", "objects_by_kind", "bytes_by_format", "enospc",
              "write_failures", "no_room", "puts", "bytes_written", "bytes_read"}


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("fmt", list(CODECS))
def test_round_trip(make_store, fmt, kind, dtype):
    store = make_store()
    array = make_array(3, SHAPES[kind], dtype)
    if fmt == "png" and dtype != "uint8":
        with pytest.raises(ValueError, match="cannot store float32"):
            store.put(key(kind, 0), array, fmt=fmt)
        return
    assert store.put(key(kind, 0), array, fmt=fmt)
    got = store.get(key(kind, 0))
    assert got.dtype == array.dtype and got.shape == array.shape
    assert np.array_equal(got, array) and got.flags.writeable and got.flags.c_contiguous
    assert store.stats()["bytes_by_format"] == {fmt: store.stats()["bytes_used"]}


def test_stats_count_the_bytes_written_and_read(make_store):
    """What a long run's CPU goes to: objects created, bytes written and read back."""
    store = make_store()
    array = make_array(1, (16, 16, 3))
    assert store.put(key("frame", 0), array, fmt="raw")
    assert store.put(key("frame", 0), array, fmt="raw")  # stored already: nothing written
    store.get(key("frame", 0))
    store.get(key("frame", 1))  # a miss reads nothing
    stats = store.stats()
    assert stats["puts"] == 1 and stats["bytes_written"] == HEADER_NBYTES + array.nbytes
    assert stats["bytes_read"] == array.nbytes


def test_default_format_is_raw_until_the_budget_binds(make_store):
    store = make_store(budget_bytes=64 * 4096)
    frame = make_array(1, (64, 64, 3))  # 12 KiB + header: 4 blocks raw, 12 fill 75 %
    for i in range(14):
        assert store.put(key("frame", i), frame)
    by_format = store.stats()["bytes_by_format"]
    assert by_format["raw"] > 0 and by_format["lz4"] > 0
    assert choose_format("clip", frame) == "raw" and choose_format("frame", frame) == "lz4"
    assert choose_format("frame", frame, capacity_bound=False) == "raw"


def test_done_objects_do_not_make_the_budget_bind(make_store):
    """Objects every reader is done with are the first to evict: a store full of them still
    stores frames raw (lz4 costs CPU and pays only against decoding again)."""
    store = make_store(budget_bytes=64 * 4096)
    frame = make_array(1, (64, 64, 3))
    for i in range(14):
        assert store.put(key("clip", i), frame)
        store.mark_done(key("clip", i))
    assert store.put(key("frame", 0), frame)
    assert store.stats()["bytes_by_format"].get("lz4", 0) == 0


def test_get_reads_a_raw_object_straight_into_its_destination(make_store):
    """A batch rebuilt from disk reads each clip into its slot: no buffer to allocate and copy
    (`out`); other formats, or another shape, come back as a new array, as without `out`."""
    store = make_store()
    clip = make_array(2, (4, 8, 8, 3))
    assert store.put(key("clip", 0), clip, fmt="raw")
    assert store.put(key("clip", 1), clip, fmt="lz4")
    batch = np.zeros((2, 4, 8, 8, 3), np.uint8)
    got = store.get(key("clip", 0), out=batch[1])
    assert np.shares_memory(got, batch[1])
    assert np.array_equal(batch[1], clip) and not batch[0].any()
    other = store.get(key("clip", 1), out=batch[0])
    assert np.array_equal(other, clip) and not np.shares_memory(other, batch)
    assert np.array_equal(store.get(key("clip", 0), out=np.zeros((3, 3), np.uint8)), clip)
    assert store.stats()["bytes_read"] == 3 * clip.nbytes
    path = store.disk.path_for(key("clip", 0))
    with open(path, "r+b") as f:  # a flipped byte: a miss, counted, never served
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    assert store.get(key("clip", 0), out=batch[1]) is None
    assert store.stats()["corrupt_detected"] == 1


def test_default_format_override(make_store):
    store = make_store(default_fmt="zstd")
    assert store.put(key("aug", 0), make_array(0, (8, 8, 3)))
    assert set(store.stats()["bytes_by_format"]) == {"zstd"}


def test_unknown_format_and_dtype_are_caller_errors(make_store):
    store = make_store()
    with pytest.raises(ValueError, match="unknown cache format 'bmp'"):
        store.put(key("frame", 0), make_array(0, (4, 4, 3)), fmt="bmp")
    with pytest.raises(ValueError, match="cannot store dtype"):
        store.put(key("frame", 1), np.array(["a"], dtype=object))
    with pytest.raises(ValueError, match="at most 8"):
        store.put(key("frame", 2), np.zeros((1,) * 9, dtype=np.uint8))
    assert object_files(store.root) == []


def test_hits_misses_and_idempotent_put(make_store):
    store = make_store()
    array = make_array(0, (8, 8, 3))
    assert store.get(key("frame", 0)) is None
    assert store.put(key("frame", 0), array)
    assert store.put(key("frame", 0), array)  # already there: True, nothing rewritten
    assert key("frame", 0) in store and store.keys() == [key("frame", 0)]
    assert store.get(key("frame", 0)) is not None
    store.note_recomputed(2)
    stats = store.stats()
    assert set(stats) == STATS_KEYS
    assert (stats["hits"], stats["misses"], stats["recomputed"], stats["objects"]) == (1, 1, 2, 1)
    assert stats["objects_by_kind"] == {"frame": 1}


def test_bytes_used_counts_whole_blocks_with_headers(make_store):
    store = make_store()
    array = make_array(0, (10, 10, 3))
    store.put(key("frame", 0), array, fmt="raw")
    (path,) = object_files(store.root)
    assert os.path.getsize(path) == HEADER_NBYTES + array.nbytes
    assert store.stats()["bytes_used"] == 4096


def test_placement_comes_from_the_digest_only(make_store):
    store = make_store()
    object_key = ObjectKey.of("clip", "../../etc/passwd", 3)
    store.put(object_key, make_array(0, (2, 4, 4, 3)))
    (path,) = object_files(store.root)
    assert path == os.path.join(store.root, "objects", object_key.hex[:2],
                                f"clip-{object_key.hex}.obj")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700


def test_object_keys():
    assert ObjectKey.of("frame", "v.mp4", 3) == ObjectKey.of("frame", "v.mp4", 3)
    assert ObjectKey.of("frame", "v.mp4", 3) != ObjectKey.of("aug", "v.mp4", 3)
    assert ObjectKey.of("frame", "v.mp4", 3) != ObjectKey.of("frame", "v.mp4", "3")
    with pytest.raises(ValueError, match="unknown object kind 'video'"):
        ObjectKey.of("video", 1)
    with pytest.raises(ValueError, match="digest must be 32 bytes"):
        ObjectKey("frame", b"short")


def test_closed_store_refuses_work(make_store):
    store = make_store()
    store.close()
    with pytest.raises(RuntimeError, match="not open"):
        store.get(key("frame", 0))


def test_a_stack_is_stored_as_its_np_stack(make_store):
    """Frames carried for a later window are written one after another, never stacked in
    memory first; what is read back is their `np.stack`, by copy or mapped."""
    store = make_store()
    frames = tuple(make_array(i, (24, 40, 3)) for i in range(5))
    assert store.put(key("frame", "pack"), Stack(frames))
    read = store.get(key("frame", "pack"))
    mapped = store.get(key("frame", "pack"), mapped=True)
    assert np.array_equal(read, np.stack(frames)) and read.flags.writeable
    assert np.array_equal(mapped, np.stack(frames)) and not mapped.flags.writeable
    assert store.stats()["bytes_written"] == HEADER_NBYTES + np.stack(frames).nbytes


def test_a_stack_under_a_binding_budget_is_compressed_whole(make_store):
    store = make_store(budget_bytes=64 * 4096)
    frames = tuple(make_array(i, (64, 64, 3)) for i in range(2))
    for i in range(8):  # past the eviction watermark: frames get a codec
        assert store.put(key("frame", i), Stack(frames))
    assert "lz4" in store.stats()["bytes_by_format"]
    for i in range(8):
        got = store.get(key("frame", i), mapped=True)
        assert got is None or np.array_equal(got, np.stack(frames))


def test_a_mapped_object_outlives_its_eviction(make_store):
    store = make_store()
    frames = tuple(make_array(i, (24, 40, 3)) for i in range(3))
    assert store.put(key("frame", "pack"), Stack(frames))
    mapped = store.get(key("frame", "pack"), mapped=True)
    store.discard(key("frame", "pack"))
    assert object_files(store.root) == []
    assert np.array_equal(mapped, np.stack(frames))


def test_a_stack_takes_arrays_of_one_shape():
    with pytest.raises(ValueError, match="one shape and dtype"):
        Stack((np.zeros((2, 2), np.uint8), np.zeros((2, 3), np.uint8)))
