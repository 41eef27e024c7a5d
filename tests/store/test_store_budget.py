"""The budget is never exceeded on disk; eviction order (SAND §6); concurrent writers."""

from __future__ import annotations

import math
import tempfile
import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sandfs.cache import ObjectStore
from sandfs.cache.disk import HEADER_NBYTES
from tests.helpers.store import BLOCK, disk_usage, key, make_array, object_files

ONE_BLOCK = BLOCK - HEADER_NBYTES  # raw uint8 bytes that fill exactly one block with the header


def blocks(count: int) -> np.ndarray:
    return make_array(count, (count * BLOCK - HEADER_NBYTES,))


def encoded_bound(nbytes: int, fmt: str | None) -> int:
    """The most bytes `nbytes` of incompressible data take as the store writes them: raw as
    they are; otherwise (lz4, which a bound budget picks for frames) an LZ4 block's bound."""
    return nbytes if fmt == "raw" else nbytes + nbytes // 255 + 16


def evicted(store: ObjectStore, names: dict[str, object]) -> set[str]:
    return {name for name, object_key in names.items() if object_key not in store}


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 30), st.integers(1, 40_000),
                  st.floats(0, 100) | st.just(math.inf), st.booleans(),
                  st.sampled_from([None, "raw", "lz4"])),
        st.tuples(st.just("done"), st.integers(0, 30)),
        st.tuples(st.just("deadline"), st.integers(0, 30), st.floats(0, 100)),
        st.tuples(st.just("get"), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(budget_blocks=st.integers(1, 24), ops=operations)
def test_budget_never_exceeded(budget_blocks, ops):
    budget_bytes = budget_blocks * BLOCK
    with tempfile.TemporaryDirectory() as root, ObjectStore(root, budget_bytes) as store:
        for op in ops:
            name = op[1]
            if op[0] == "put":
                _, _, nbytes, deadline, needed, fmt = op
                array = make_array(name, (nbytes,))
                stored = store.put(key("frame", name, nbytes), array, fmt=fmt,
                                   deadline=deadline, needed_again=needed)
                assert stored or HEADER_NBYTES + encoded_bound(nbytes, fmt) > BLOCK or (
                    store.stats()["objects"])
            elif op[0] == "done":
                store.mark_done(key("frame", name))
            elif op[0] == "deadline":
                store.set_deadline(key("frame", name), op[2])
            else:
                store.get(key("frame", name))
            apparent, allocated = disk_usage(root)
            assert apparent <= store.stats()["bytes_used"] <= budget_bytes
            assert allocated <= budget_bytes
            assert store.check() == []


def test_eviction_starts_at_75_percent_with_done_objects_first(make_store):
    store = make_store(budget_bytes=8 * BLOCK, default_fmt="raw")  # evicts above 6 blocks
    names = {f"d{d}": key("frame", "d", d) for d in (10, 20, 30, 40)}
    for deadline, name in zip((10, 20, 30, 40), names, strict=True):
        assert store.put(names[name], blocks(1), deadline=deadline)
    names["done_a"], names["done_b"] = key("frame", "a"), key("frame", "b")
    assert store.put(names["done_a"], blocks(1), deadline=50)
    assert store.put(names["done_b"], blocks(1), needed_again=False)
    store.mark_done(names["done_a"])
    assert store.stats()["bytes_used"] == 6 * BLOCK and evicted(store, names) == set()
    names["new"] = key("frame", "new")
    assert store.put(names["new"], blocks(1), deadline=5)  # 7 > 6 blocks: one must go
    assert evicted(store, names) == {"done_b"}  # done ones first, oldest done first
    names["new2"] = key("frame", "new2")
    assert store.put(names["new2"], blocks(2), deadline=5)
    assert evicted(store, names) == {"done_b", "done_a", "d40"}  # then the farthest deadline
    assert store.stats()["evictions"] == 3
    assert store.stats()["bytes_used"] == 6 * BLOCK


def test_a_farther_object_never_evicts_a_nearer_one(make_store):
    store = make_store(budget_bytes=8 * BLOCK, default_fmt="raw")
    near = [key("frame", "near", i) for i in range(6)]
    for i, object_key in enumerate(near):
        assert store.put(object_key, blocks(1), deadline=i)
    # above the watermark up to the budget, then no room: nothing nearer is given up
    assert store.put(key("frame", "far", 0), blocks(1), deadline=100)
    assert store.put(key("frame", "far", 1), blocks(1), deadline=100)
    assert not store.put(key("frame", "far", 2), blocks(1), deadline=100)
    assert all(object_key in store for object_key in near)
    assert store.stats()["no_room"] == 1
    # a nearer object takes the farthest ones' room, down to the watermark
    assert store.put(key("frame", "urgent"), blocks(1), deadline=0.5)
    assert key("frame", "far", 0) not in store and key("frame", "far", 1) not in store
    assert store.stats()["bytes_used"] == 6 * BLOCK


def test_set_deadline_reorders_eviction(make_store):
    store = make_store(budget_bytes=4 * BLOCK, default_fmt="raw")  # evicts above 3 blocks
    a, b, c = (key("frame", name) for name in "abc")
    store.put(a, blocks(1), deadline=1)
    store.put(b, blocks(1), deadline=2)
    store.put(c, blocks(1), deadline=3)
    store.set_deadline(a, 10)
    assert store.put(key("frame", "d"), blocks(1), deadline=0)
    assert a not in store and b in store and c in store


def test_too_big_for_the_budget_writes_nothing(make_store):
    store = make_store(budget_bytes=2 * BLOCK)
    assert not store.put(key("frame", 0), blocks(3), fmt="raw")
    assert object_files(store.root) == [] and store.stats()["no_room"] == 1


def test_discard(make_store):
    store = make_store()
    store.put(key("clip", 0), blocks(1))
    assert store.object_count() == 1
    assert store.discard(key("clip", 0)) and not store.discard(key("clip", 0))
    assert object_files(store.root) == [] and store.stats()["bytes_used"] == 0
    assert store.object_count() == 0  # planning on an empty store looks nothing up


def test_concurrent_writers_and_readers_stay_in_budget(make_store):
    budget_bytes = 40 * BLOCK
    store = make_store(budget_bytes=budget_bytes)
    stop = threading.Event()
    peaks = []

    def watch() -> None:
        while not stop.is_set():
            peaks.append(disk_usage(store.root)[0])

    def work(worker: int) -> None:
        rng = np.random.default_rng(worker)
        for i in range(150):
            name = int(rng.integers(0, 60))
            array = make_array(name, (int(rng.integers(1, 4)) * ONE_BLOCK,))
            object_key = key("aug", name, array.size)
            if rng.random() < 0.5:
                store.put(object_key, array, deadline=float(rng.integers(0, 50)))
            elif (got := store.get(object_key)) is not None:
                assert np.array_equal(got, array)
            if i % 7 == 0:
                store.mark_done(object_key)

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    watcher.join()
    assert max(peaks) <= budget_bytes
    assert store.stats()["evictions"] > 0


def test_put_of_a_stored_object_updates_only_its_bookkeeping(make_store):
    store = make_store(budget_bytes=4 * BLOCK, default_fmt="raw")
    a, b, c = (key("frame", name) for name in "abc")
    store.put(a, blocks(1), deadline=1)
    store.put(b, blocks(1), deadline=2)
    store.put(c, blocks(1), deadline=3)
    assert store.put(b, blocks(1))  # no deadline given: b keeps 2
    assert store.put(a, blocks(1), needed_again=False)  # a is done: the first to go
    assert store.put(key("frame", "d"), blocks(1), deadline=0)
    assert a not in store and b in store and c in store


def test_done_objects_count_as_room_for_what_is_still_needed(make_store):
    """`room_below` leaves out objects marked done (the first to evict): a store full of read
    clips still has room for frames carried ahead."""
    store = make_store(budget_bytes=64 * 4096)
    array = make_array(1, (32, 32, 3))  # 3 KiB + header: one block
    for i in range(8):
        assert store.put(key("clip", i), array)
    needed_room = store.room_below(0.5)
    assert needed_room == 32 * 4096 - 8 * 4096
    for i in range(8):
        store.mark_done(key("clip", i))
    assert store.room_below(0.5) == 32 * 4096
    store.set_deadline(key("clip", 0), 5)  # needed again
    assert store.room_below(0.5) == 31 * 4096
    store.discard(key("clip", 1))
    assert store.room_below(0.5) == 31 * 4096 and store.check() == []
