"""Giving the memory malloc holds free back to the kernel (`runtime.trim_free_memory`) once
the planner freed much it will not allocate again soon: a window whole from its parts, pruned
or dropped (docs/design.md#memory-beyond-the-plan)."""

from __future__ import annotations

import trio

from sandfs.runtime import trim_free_memory


class HeapTrims:
    """One trim at a time, in a thread, for all asked for until it starts (each walks every
    heap, locked)."""

    def __init__(self) -> None:
        self._asked, self._running = False, trio.Lock()

    def ask(self, nursery: trio.Nursery) -> None:
        if not self._asked:
            nursery.start_soon(self._trim)
        self._asked = True

    async def _trim(self) -> None:
        async with self._running:  # a trim running: the next one starts after it
            self._asked = False
            await trio.to_thread.run_sync(trim_free_memory, abandon_on_cancel=True)
