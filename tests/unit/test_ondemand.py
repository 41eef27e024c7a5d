"""On-demand objects in-process (pytest-trio): single flight, remembered failures, the memory
bound."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from sandfs.sched.flights import ObjectFailed
from sandfs.sched.ondemand import OnDemandObjects


class Counting:
    def __init__(self, payload: bytes = b"x" * 100, delay_seconds: float = 0.05) -> None:
        self.calls = 0
        self.payload = payload
        self.delay_seconds = delay_seconds
        self.lock = threading.Lock()

    def __call__(self) -> bytes:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_seconds)
        return self.payload


async def test_concurrent_readers_materialize_once():
    engine = OnDemandObjects(workers=2, memory_budget_bytes=1 << 20)
    compute = Counting()
    results = []

    async def reader():
        results.append(await engine.get("k", compute))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(reader)
    assert compute.calls == 1 and results == [compute.payload] * 8
    assert engine.state("k") == "ready"


async def test_failure_is_remembered_not_retried():
    engine = OnDemandObjects(workers=1, memory_budget_bytes=1 << 20)
    calls = []

    def broken() -> bytes:
        calls.append(1)
        raise ValueError("corrupt frame")

    for _ in range(3):
        with pytest.raises(ObjectFailed, match="corrupt frame"):
            await engine.get("bad", broken)
    assert len(calls) == 1 and engine.state("bad") == "failed"


async def test_memory_stays_within_budget():
    engine = OnDemandObjects(workers=1, memory_budget_bytes=1000)
    for key in range(20):
        await engine.get(key, Counting(b"y" * 300, 0))
    assert engine.memory_bytes <= 1000
    assert engine.state(19) == "ready" and engine.state(0) == "planned"


async def test_state_is_materializing_while_in_flight():
    engine = OnDemandObjects(workers=1, memory_budget_bytes=1 << 20)
    started, release = threading.Event(), threading.Event()

    def slow() -> bytes:
        started.set()
        release.wait(5)
        return b"z"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine.get, "k", slow)
        await trio.to_thread.run_sync(started.wait, 5)
        assert engine.state("k") == "materializing" and engine.demand_waiting == 1
        release.set()
    assert engine.state("k") == "ready" and engine.demand_waiting == 0
