"""The store's size without a given budget: the kernel's writeback threshold or the run's
need, within the disk bound; a store resized when tasks come and go."""

from __future__ import annotations

import numpy as np
import trio

from sandfs.cache.sizing import STORE_WINDOWS, StoreSizing, window_nbytes, writeback_threshold
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan
from tests.helpers.store import key


def write_vm(tmp_path, *, background_bytes: int, ratio: int, available_kib: int):
    vm = tmp_path / "vm"
    vm.mkdir()
    (vm / "dirty_background_bytes").write_text(f"{background_bytes}\n")
    (vm / "dirty_background_ratio").write_text(f"{ratio}\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       32000000 kB\nMemFree:         1000 kB\n"
                       f"MemAvailable:   {available_kib} kB\n")
    return str(vm), str(meminfo)


def test_threshold_is_the_ratio_of_available_memory(tmp_path):
    vm, meminfo = write_vm(tmp_path, background_bytes=0, ratio=10, available_kib=20_000_000)
    assert writeback_threshold(vm, meminfo) == 20_000_000 * 1024 // 10


def test_threshold_in_bytes_wins_over_the_ratio(tmp_path):
    vm, meminfo = write_vm(tmp_path, background_bytes=123 << 20, ratio=10,
                           available_kib=20_000_000)
    assert writeback_threshold(vm, meminfo) == 123 << 20


def test_threshold_unreadable_is_zero(tmp_path):
    assert writeback_threshold(str(tmp_path / "no-vm"), str(tmp_path / "no-meminfo")) == 0
    vm, meminfo = write_vm(tmp_path, background_bytes=0, ratio=10, available_kib=1)
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")  # no MemAvailable line
    assert writeback_threshold(vm, meminfo) == 0


def plan(tmp_path, task: str, **overrides):
    folder = tmp_path / task
    folder.mkdir()
    return make_plan(folder, videos=fake_videos(12), task=task, **overrides)


def two_pipelines(tmp_path):
    return plan(tmp_path, "small"), plan(tmp_path, "big", sampling={"frames_per_video": 16})


def test_need_is_windows_of_distinct_batches(tmp_path):
    small, big = two_pipelines(tmp_path)
    one = small.k_epochs * small.iterations_per_epoch * small.view_nbytes(0, 0)
    assert window_nbytes([small]) == one
    assert window_nbytes([small, big]) > window_nbytes([big]) > one
    trial = plan(tmp_path, "trial")
    assert trial.sharing_key == small.sharing_key  # a search's identical trial: counted once
    assert window_nbytes([small, trial]) == one


def test_store_keeps_the_larger_of_threshold_and_need_within_the_bound(tmp_path):
    small, big = two_pipelines(tmp_path)
    need = STORE_WINDOWS * window_nbytes([small, big])
    sized = StoreSizing(budget_bytes=1 << 40, given=False, writeback_bytes=need // 2, floor_bytes=0)
    assert sized.store_bytes([small, big]) == need
    assert sized.store_bytes([]) == need // 2
    bounded = StoreSizing(budget_bytes=need // 3, given=False, writeback_bytes=0, floor_bytes=0)
    assert bounded.store_bytes([small, big]) == need // 3
    given = StoreSizing(budget_bytes=1 << 40, given=True, writeback_bytes=need)
    assert given.store_bytes([small, big]) == 1 << 40
    floored = StoreSizing(budget_bytes=1 << 40, given=False, writeback_bytes=0)
    assert floored.store_bytes([]) == floored.floor_bytes


def test_shrinking_evicts_done_objects_first(make_store):
    store = make_store(budget_bytes=1 << 20)
    arrays = {name: np.full(100_000, i, np.uint8) for i, name in enumerate("abcd")}
    for i, (name, array) in enumerate(arrays.items()):
        assert store.put(key("clip", name), array, deadline=float(i))
    store.mark_done(key("clip", "b"))
    assert store.resize(310_000) == 1  # four objects of 25 blocks each
    assert key("clip", "b") not in store and key("clip", "a") in store
    assert store.resize(210_000) == 1  # then the farthest deadline
    assert key("clip", "d") not in store and key("clip", "c") in store
    assert store.resize(1 << 20) == 0
    assert store.put(key("clip", "d"), arrays["d"], deadline=3.0)
    assert store.stats()["budget_bytes"] == 1 << 20


def engine() -> OnDemandObjects:
    return OnDemandObjects(workers=1, memory_budget_bytes=1 << 20)


def test_store_follows_the_tasks_when_one_ends(tmp_path, make_store):
    small, big = two_pipelines(tmp_path)
    sizing = StoreSizing(budget_bytes=1 << 40, given=False, writeback_bytes=0, floor_bytes=0)
    store = make_store(budget_bytes=sizing.store_bytes([small, big]))
    service = ViewService([small, big], engine=engine(), stats=Stats(), store=store,
                          store_sizing=sizing)
    trio.run(service.remove_task, "big")
    assert store.budget_bytes == STORE_WINDOWS * window_nbytes([small])
    given = StoreSizing(budget_bytes=1 << 30, given=True, writeback_bytes=0)
    service = ViewService([small], engine=engine(), stats=Stats(), store=store,
                          store_sizing=given)
    store.resize(5 << 20)
    trio.run(service.remove_task, "small")
    assert store.budget_bytes == 5 << 20  # a given budget is the user's: never resized
