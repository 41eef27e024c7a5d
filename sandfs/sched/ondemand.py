"""Objects made on demand, not prepared ahead by the scheduler: single frames, intermediate
(aug{D}) views, recomputed batches. Single flight in worker threads (under the limiter the
scheduler's jobs share), an in-memory LRU bounded in bytes, remembered failures."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

import trio

from sandfs.sched.flights import Flights, ObjectFailed

log = logging.getLogger(__name__)


class OnDemandObjects:
    def __init__(self, *, workers: int, memory_budget_bytes: int) -> None:
        self.workers = max(1, workers)
        self.memory_budget_bytes = memory_budget_bytes
        self.limiter = trio.CapacityLimiter(self.workers)
        self._ready: OrderedDict[Hashable, bytes] = OrderedDict()
        self._ready_bytes = 0
        self._flights = Flights()
        self.demand_waiting = 0

    def state(self, key: Hashable) -> str:
        if self._flights.failed(key):
            return "failed"
        if key in self._ready:
            return "ready"
        if self._flights.in_flight(key):
            return "materializing"
        return "planned"

    @property
    def memory_bytes(self) -> int:
        return self._ready_bytes

    async def get(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        """The object's bytes, materializing it (once, whoever asks) if needed."""
        while True:
            self._flights.check(key)
            data = self._ready.get(key)
            if data is not None:
                self._ready.move_to_end(key)
                return data
            if not self._flights.in_flight(key):
                self.demand_waiting += 1
                try:
                    return await self._materialize(key, compute)
                finally:
                    self.demand_waiting -= 1
            await self._flights.event(key).wait()

    async def _materialize(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        self._flights.event(key)
        try:
            started = time.monotonic()
            data = await trio.to_thread.run_sync(compute, limiter=self.limiter)
            log.debug("materialized %s in %.3fs", key, time.monotonic() - started)
        except Exception as exc:  # a domain failure: remember it, answer EIO, never retry-loop
            reason = f"{type(exc).__name__}: {exc}"
            log.error("object %s failed: %s", key, reason)
            self._flights.fail(key, reason)
            raise ObjectFailed(reason) from exc
        else:
            self._store(key, data)
            return data
        finally:
            self._flights.settle(key)

    def _store(self, key: Hashable, data: bytes) -> None:
        self._ready[key] = data
        self._ready_bytes += len(data)
        while self._ready_bytes > self.memory_budget_bytes and len(self._ready) > 1:
            _, old = self._ready.popitem(last=False)
            self._ready_bytes -= len(old)
