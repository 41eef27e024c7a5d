"""The object engine: single-flight materialization in worker threads, an in-memory store of
finished objects bounded in bytes, remembered failures, and read-ahead of the next views.

The trio loop never blocks: every materialization runs in `trio.to_thread.run_sync` under a
limiter of `workers` threads. Demand reads and read-ahead share the workers; read-ahead holds
at most `workers - 1` of them so a demand read always finds one free.
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
        self._limiter = trio.CapacityLimiter(self.workers)
        self._ahead_limiter = trio.CapacityLimiter(max(1, self.workers - 1))
        self._ready: OrderedDict[Hashable, bytes] = OrderedDict()
        self._ready_bytes = 0
        self._inflight: dict[Hashable, trio.Event] = {}
        self._failed: dict[Hashable, str] = {}
        self._nursery: trio.Nursery | None = None
        self.demand_waiting = 0
        self.ahead_queued = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Own the read-ahead tasks: they live in this nursery until the daemon stops."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

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
                    return await self._materialize(key, compute, self._limiter)
                finally:
                    self.demand_waiting -= 1
            await event.wait()

    def prefetch(self, key: Hashable, compute: Callable[[], bytes]) -> None:
        """Materialize in the background unless it is ready, in flight or failed."""
        if self._nursery is None or self.state(key) != "planned":
            return
        self._inflight[key] = trio.Event()  # claim it now so a second prefetch is a no-op
        self.ahead_queued += 1
        self._nursery.start_soon(self._prefetch_one, key, compute, name=f"ahead {key}")

    async def _prefetch_one(self, key: Hashable, compute: Callable[[], bytes]) -> None:
        try:
            async with self._ahead_limiter:
                await self._materialize(key, compute, self._limiter, claimed=True)
        except ObjectFailed:
            pass  # remembered; a reader of it gets EIO
        finally:
            self.ahead_queued -= 1

    async def _materialize(self, key, compute, limiter, *, claimed: bool = False) -> bytes:
        event = self._inflight[key] if claimed else self._inflight.setdefault(key, trio.Event())
        try:
            started = time.monotonic()
            data = await trio.to_thread.run_sync(compute, limiter=limiter)
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
