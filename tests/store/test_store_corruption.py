"""Corrupt objects are detected, logged once, deleted and counted; never served."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable

import numpy as np
import pytest

from sandfs.cache import ObjectStore
from sandfs.cache.disk import (
    _FIELDS,
    HEADER_NBYTES,
    MAGIC,
    MAX_NDIM,
    VERSION,
    CorruptObjectError,
    checksum,
    decode_header,
)
from sandfs.cache.formats import CODECS_BY_CODE
from sandfs.cache.keys import KIND_CODES, KINDS
from tests.helpers.reliability import record
from tests.helpers.store import SHAPES, key, make_array

_LENGTH_OFFSET = _FIELDS.size - 16  # payload length, then payload checksum, then header checksum


def _rewrite(path: str, transform) -> None:
    with open(path, "rb") as file:
        data = bytearray(file.read())
    with open(path, "wb") as file:
        file.write(transform(data))


def _flip(offset_of: Callable[[bytearray], int]) -> Callable[[bytearray], bytearray]:
    def flip(data: bytearray) -> bytearray:
        data[offset_of(data)] ^= 0x10
        return data
    return flip


def _set_length(data: bytearray, *, fix_checksum: bool) -> bytearray:
    struct.pack_into("<Q", data, _LENGTH_OFFSET, 2**64 - 1)
    if fix_checksum:  # a forged header: only the file-size check stands in the way
        struct.pack_into("<Q", data, _FIELDS.size, checksum(bytes(data[: _FIELDS.size])))
    return data


INJECTIONS = {
    "truncate_to_0": lambda data: b"",
    "truncate_to_half": lambda data: data[: len(data) // 2],
    "append_junk": lambda data: data + b"junk" * 10,
    "flip_payload_bit": _flip(lambda data: HEADER_NBYTES + (len(data) - HEADER_NBYTES) // 2),
    "flip_header_bit": _flip(lambda data: 30),
    "length_u64_max": lambda data: _set_length(data, fix_checksum=False),
    "length_u64_max_forged": lambda data: _set_length(data, fix_checksum=True),
    "wrong_magic": lambda data: b"XANDOBJ" + data[len(MAGIC):],
}


def _store_two(make_store, kind: str, fmt: str = "raw"):
    store = make_store()
    arrays = {key(kind, i): make_array(i, SHAPES[kind]) for i in range(2)}
    for object_key, array in arrays.items():
        assert store.put(object_key, array, fmt=fmt)
    return store, arrays


def _assert_detected(store: ObjectStore, object_keys: list, caplog, injected: int) -> None:
    paths = [store.disk.path_for(object_key) for object_key in object_keys]
    with caplog.at_level(logging.WARNING, logger="sandfs.cache"):
        served = [store.get(object_key) for object_key in object_keys]
        again = [store.get(object_key) for object_key in object_keys]  # a plain miss now
    record("cache_damage", damaged=injected, detected=store.stats()["corrupt_detected"],
           served=sum(a is not None for a in served + again))
    assert served == again == [None] * len(object_keys)  # 0 wrong arrays
    for path in paths:
        assert not os.path.exists(path)
        assert sum(path in line.getMessage() for line in caplog.records) == 1
    assert store.stats()["corrupt_detected"] == injected


@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("injection", list(INJECTIONS))
def test_corruption_detected_on_read(make_store, caplog, kind, injection):
    store, arrays = _store_two(make_store, kind, fmt="lz4" if kind == "frame" else "raw")
    broken, intact = list(arrays)
    _rewrite(store.disk.path_for(broken), INJECTIONS[injection])
    _assert_detected(store, [broken], caplog, injected=1)
    assert np.array_equal(store.get(intact), arrays[intact])


@pytest.mark.parametrize("injection", list(INJECTIONS))
def test_corruption_detected_on_a_mapped_read(make_store, caplog, injection):
    """A read without a copy (a pack of carried frames) verifies as much as a read does."""
    store, arrays = _store_two(make_store, "frame")
    broken, intact = list(arrays)
    _rewrite(store.disk.path_for(broken), INJECTIONS[injection])
    with caplog.at_level(logging.WARNING, logger="sandfs.cache"):
        assert store.get(broken, mapped=True) is None
    assert store.stats()["corrupt_detected"] == 1
    assert not os.path.exists(store.disk.path_for(broken))
    assert np.array_equal(store.get(intact, mapped=True), arrays[intact])


@pytest.mark.parametrize("kind", list(SHAPES))
def test_swapped_objects_with_valid_checksums(make_store, caplog, kind):
    store, arrays = _store_two(make_store, kind)
    first, second = (store.disk.path_for(object_key) for object_key in arrays)
    assert os.path.getsize(first) == os.path.getsize(second)
    os.rename(first, first + ".swap")
    os.rename(second, first)
    os.rename(first + ".swap", second)
    _assert_detected(store, list(arrays), caplog, injected=2)


def test_every_injection_detected_by_the_startup_scan(make_store, caplog):
    """The same injections after a crash (no index snapshot): the header scan finds those it
    can see in headers and sizes; the payload flips are left to the read."""
    store = make_store()
    injections = {key(kind, name): name for kind in SHAPES for name in INJECTIONS}
    arrays = {object_key: make_array(i, SHAPES[object_key.kind])
              for i, object_key in enumerate(injections)}
    for object_key, array in arrays.items():
        assert store.put(object_key, array, fmt="raw")
    store.close()
    os.unlink(os.path.join(store.root, "index.json"))
    for object_key, name in injections.items():
        _rewrite(store.disk.path_for(object_key), INJECTIONS[name])
    reopened = ObjectStore(store.root, 1 << 20)
    with caplog.at_level(logging.WARNING, logger="sandfs.cache"):
        report = reopened.open()
        served = sum(reopened.get(object_key) is not None for object_key in arrays)
    record("cache_damage", damaged=len(arrays), detected=reopened.stats()["corrupt_detected"],
           served=served)
    assert served == 0
    assert reopened.stats()["corrupt_detected"] == len(arrays)
    assert report.corrupt_removed == len(arrays) - len(SHAPES)  # all but the payload flips
    assert reopened.check() == [] and reopened.stats()["objects"] == 0
    reopened.close()


def test_objects_removed_as_corrupt_at_open_count_as_recomputed_when_stored_again(make_store):
    store = make_store()
    arrays = {key("frame", i): make_array(i, SHAPES["frame"]) for i in range(3)}
    for object_key, array in arrays.items():
        assert store.put(object_key, array, fmt="raw")
    store.close()
    os.unlink(os.path.join(store.root, "index.json"))  # a crash: the open reads every header
    damaged, kept, _ = arrays
    _rewrite(store.disk.path_for(damaged), INJECTIONS["wrong_magic"])
    reopened = ObjectStore(store.root, 1 << 20)
    assert reopened.open().corrupt_removed == 1
    assert (reopened.stats()["corrupt_detected"], reopened.stats()["recomputed"]) == (1, 0)
    assert reopened.put(kept, arrays[kept]) and reopened.put(key("frame", 9), arrays[kept])
    assert reopened.stats()["recomputed"] == 0  # still there, or never lost: not recomputed
    assert reopened.put(damaged, arrays[damaged])
    assert reopened.put(damaged, arrays[damaged])  # already there: counted once
    assert reopened.stats()["recomputed"] == 1
    assert np.array_equal(reopened.get(damaged), arrays[damaged])
    reopened.close()


def test_another_version_is_a_miss_and_deleted(make_store):
    store, arrays = _store_two(make_store, "batch")
    object_key = next(iter(arrays))
    path = store.disk.path_for(object_key)
    _rewrite(path, lambda data: data[: len(MAGIC)] + b"\x02" + data[len(MAGIC) + 1 :])
    assert store.get(object_key) is None and not os.path.exists(path)


def test_verify_payloads_reports_without_deleting(make_store):
    store, arrays = _store_two(make_store, "clip")
    path = store.disk.path_for(next(iter(arrays)))
    _rewrite(path, INJECTIONS["flip_payload_bit"])
    assert store.check() == []
    problems = store.check(verify_payloads=True)
    assert len(problems) == 1 and "payload checksum mismatch" in problems[0]
    assert os.path.exists(path)
    store.get(next(iter(arrays)))  # leaves the store consistent for the teardown check


@pytest.mark.parametrize("shape", [(1 << 20, 1 << 20), ((1 << 64) - 1,) * 8])
def test_a_header_whose_shape_is_too_large_is_corrupt(shape):
    """Past MAX_OBJECT_BYTES the header is taken for corrupt, not allocated; the product is
    exact for the largest fields the format holds (eight 2^64 - 1 dimensions)."""
    some = key(KINDS[0])
    fields = _FIELDS.pack(MAGIC, VERSION, KIND_CODES[some.kind], next(iter(CODECS_BY_CODE)),
                          len(shape), b"|u1", some.digest,
                          *shape, *(0,) * (MAX_NDIM - len(shape)), 0, 0)
    header = fields + struct.pack("<Q", checksum(fields))
    with pytest.raises(CorruptObjectError, match="exceeds"):
        decode_header(header)
