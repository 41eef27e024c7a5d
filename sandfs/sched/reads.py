"""What readers tell the scheduler and ask it: a view opened or closed (where each task
stands, from which deadlines count), a ready view taken, a reader waiting for one (the demand
feed). `ReaderSide` is a part of `Scheduler` (its base), kept apart from choosing, starting and
recording jobs; it runs in the trio loop, once or twice per view read."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from sandfs.cache import ObjectStore
from sandfs.plan.window import ViewKey, view_key
from sandfs.sched.board import BatchBoard
from sandfs.sched.idle import check_reach
from sandfs.sched.objects import mark_read
from sandfs.sched.planning import WindowPlanner
from sandfs.sched.windows import Position, WindowBook


class ReaderSide:
    book: WindowBook
    board: BatchBoard
    planner: WindowPlanner
    store: ObjectStore | None
    windows_ahead: int
    wake: Callable[[], None]

    def position(self, task: str) -> Position:
        return self.book.position(task)

    def opened(self, task: str, epoch: int, iteration: int) -> None:
        """A reader opened a view: the task stands there, unless it re-reads a ready view
        behind its position (a probe or a second reader must not drag the windows back)."""
        if task not in self.book.plans:  # a task that left: the mount serves the book's only
            return
        check_reach(self.book, task, epoch, self.windows_ahead)
        key = view_key(self.book.plans[task], epoch, iteration)
        moves = (self.book.index(task, epoch, iteration) >= self.book.positions[task]
                 or key not in self.board.ready)
        self.book.opened(task, epoch, iteration, moves=moves, now=time.monotonic())
        self.planner.reader_came(task)
        self.wake()

    def released(self, task: str, epoch: int, iteration: int) -> bool:
        """A view opened with `opened` was closed. True when every task that reads it has
        read it (a batch dropped or never planned counts as read; one planned again after
        leaving memory unread does not)."""
        self.book.released(task, epoch, iteration)
        plan = self.book.plans.get(task)
        if plan is None:  # the task has ended
            return False
        key = view_key(plan, epoch, iteration)
        ready = self.board.ready.get(key)
        return not ready.readers_left if ready is not None else key not in self.board.views

    def ready_view(self, key: ViewKey, task: str) -> memoryview | None:
        ready = self.board.take(key, task)
        if ready is None:
            return None
        if not ready.readers_left and self.store is not None:
            found = self.book.view(key)
            if found is not None:
                plan, epoch, iteration = found[1]
                mark_read(self.store, key, plan, ready.view or plan.view_plan(epoch, iteration))
        return ready.data

    def view_state(self, key: ViewKey) -> str:
        """user.sand.state: ready means in memory or complete on disk."""
        return self.board.state_of(key)

    async def wait_view(self, key: ViewKey, task: str) -> memoryview | None:
        """Demand-feed: raise the view's jobs to the top and wait. None: no job will make it."""
        flights = self.board.flights
        flights.check(key)
        if not self.board.is_planned(key):
            await self.planner.window_planned(task, key.epoch, key)
        if not self.board.is_planned(key):
            return None
        self.planner.reader_came(task)
        if key not in self.board.ready:
            event = flights.event(key)
            self.board.wait_started(key)
            self.wake()
            try:  # the background scan holds meanwhile: its GIL is this batch's jobs'
                with self._scan_holds(task):
                    await event.wait()
            finally:
                self.board.wait_ended(key)
        flights.check(key)
        return self.ready_view(key, task)

    def _scan_holds(self, task: str) -> contextlib.AbstractContextManager[None]:
        plan = self.book.plans.get(task)
        return contextlib.nullcontext() if plan is None else plan.probes.readers_wait()

    def ready_ahead(self, task: str, count: int) -> int:
        plan = self.book.plans[task]
        return sum(view_key(plan, epoch, iteration) in self.board.ready
                   for epoch, iteration in self.book.ahead(task, count))
