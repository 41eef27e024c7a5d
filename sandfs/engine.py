"""The object engine: single-flight, on-demand materialization in worker threads, an in-memory
store of finished objects bounded in bytes, and remembered failures. It serves what the
scheduler did not prepare ahead: single frames, intermediate views, recomputed batches.

The trio loop never blocks: every materialization runs in `trio.to_thread.run_sync` under the
limiter of `workers` threads that the scheduler's jobs share.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

import trio

log = logging.getLogger(__name__)


class ObjectFailed(Exception):
    """Materializing an object failed; the reason is remembered and re-raised on every read."""


class ObjectEngine:
    def __init__(self, *, workers: int, memory_budget_bytes: int) -> None:
        self.workers = max(1, workers)
        self.memory_budget_bytes = memory_budget_bytes
        self.limiter = trio.CapacityLimiter(self.workers)
        self._ready: OrderedDict[Hashable, bytes] = OrderedDict()
        self._ready_bytes = 0
        self._inflight: dict[Hashable, trio.Event] = {}
        self._failed: dict[Hashable, str] = {}
        self.demand_waiting = 0

    # -- state -------------------------------------------------------------------------------

    def state(self, key: Hashable) -> str:
        if key in self._failed:
            return "failed"
        if key in self._ready:
            return "ready"
        if key in self._inflight:
            return "materializing"
        return "planned"

    @property
    def memory_bytes(self) -> int:
        return self._ready_bytes

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        """The object's bytes, materializing it (once, whoever asks) if needed."""
        while True:
            if key in self._failed:
                raise ObjectFailed(self._failed[key])
            data = self._ready.get(key)
            if data is not None:
                self._ready.move_to_end(key)
                return data
            event = self._inflight.get(key)
            if event is None:
                self.demand_waiting += 1
                try:
                    return await self._materialize(key, compute)
                finally:
                    self.demand_waiting -= 1
            await event.wait()

    async def _materialize(self, key: Hashable, compute: Callable[[], bytes]) -> bytes:
        event = self._inflight.setdefault(key, trio.Event())
        try:
            started = time.monotonic()
            data = await trio.to_thread.run_sync(compute, limiter=self.limiter)
            log.debug("materialized %s in %.3fs", key, time.monotonic() - started)
        except Exception as exc:  # a domain failure: remember it, answer EIO, never retry-loop
            reason = f"{type(exc).__name__}: {exc}"
            self._failed[key] = reason
            log.error("object %s failed: %s", key, reason)
            raise ObjectFailed(reason) from exc
        else:
            self._store(key, data)
            return data
        finally:
            del self._inflight[key]
            event.set()

    def _store(self, key: Hashable, data: bytes) -> None:
        self._ready[key] = data
        self._ready_bytes += len(data)
        while self._ready_bytes > self.memory_budget_bytes and len(self._ready) > 1:
            _, old = self._ready.popitem(last=False)
            self._ready_bytes -= len(old)
