"""The scheduler's memory ledger: what it holds (batches ready and being filled, the frames of
running jobs, carried frames waiting to be written) and what a job may take against
`memory_limit_bytes` (the scheduler's share of memory_limit). With job worker processes
(`engine: execution: processes`) batch buffers and carried frames are shared memory, counted
the same; the workers' scratch is counted too (`shared`), and a pass's frames are charged as
`frame_bytes` wherever it decodes.

The ledger holds: memory_bytes <= limit, with one exception. A job a blocked reader waits for
takes its frames and that reader's batch even over the limit when no other job runs and no
carried frames wait to be written — nothing else would free memory, and half-filled batches
would wait forever for the frames that fill them. So it goes over by at most one decode pass
and the batches that pass fills for blocked readers (docs/performance.md#memory)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from sandfs.cache import ObjectStore
from sandfs.plan.window import ViewKey
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.objects import clip_object_key
from sandfs.sched.policy import NOT_NEEDED, displace_horizon, may_displace, under_pressure
from sandfs.sched.windows import WindowBook

log = logging.getLogger(__name__)


class MemoryLedger:
    def __init__(self, limit_bytes: int, *, book: WindowBook, board: BatchBoard,
                 carry: CarryBook, running: Mapping, store: ObjectStore | None,
                 shared: Callable[[], int] | None = None) -> None:
        """`shared()`: the bytes of shared memory job worker processes hold beside batch
        buffers and carried frames (counted here already, wherever they live)."""
        self.limit_bytes = limit_bytes
        self.shared = shared
        self.book, self.board, self.carry, self.store = book, board, carry, store
        self.running = running  # the scheduler's running jobs, by key
        self._warned_over = False  # the limit is smaller than one decode pass: said once
        self._iterations = (-1, 0)  # (the book's task generation, iterations_in_memory)

    @property
    def used_bytes(self) -> int:
        frames = sum(job.frame_bytes for job in self.running.values())
        shared = self.shared() if self.shared is not None else 0
        return self.board.memory_bytes + frames + self.carry.nbytes + shared

    @property
    def free_bytes(self) -> int:
        return self.limit_bytes - self.used_bytes

    def under_pressure(self) -> bool:
        """Is memory short? Batches every reader has read do not count: they are room, dropped
        whenever a job needs it (counted, they made the scheduler pick the shortest job while
        memory was free)."""
        return under_pressure(self.used_bytes - self.board.read_bytes(), self.limit_bytes)

    def frees_soon(self) -> bool:
        """Will memory be freed without a new job: a job runs, or carried frames wait to be
        written? (Either wakes the dispatcher when it is done.)"""
        return bool(self.running) or self.carry.nbytes > 0

    def room_for_frames(self, frame_bytes: int, *, demanded: bool) -> int | None:
        """The memory left once a video job takes `frame_bytes` of decoded frames (dropping
        batches every reader has read to make room); None: it waits. Unread batches stay:
        pushed out, they would be built again."""
        free = self._read_dropped(frame_bytes, self.free_bytes)
        if frame_bytes > free and (not demanded or self.frees_soon()):
            return None
        if frame_bytes > free and not self._warned_over:
            self._warned_over = True
            log.warning("memory_limit is too small for this run: a decode pass of %d MiB goes "
                        "%d MiB over the scheduler's %d MiB; raise it", frame_bytes >> 20,
                        (frame_bytes - free) >> 20, self.limit_bytes >> 20)
        return free - frame_bytes

    def room_to_carry(self, free: int) -> int:
        """Room for frames carried to later windows beside a job that leaves `free`: batches
        every reader has read count as room (`make_room` drops them). Counting them as taken
        left no room once memory was full of read batches, and a 100-epoch run decoded 2.3x
        the frames."""
        return free + self.board.read_bytes()

    def make_room(self, nbytes: int, free: int) -> int:
        """`free` once `nbytes` more are taken, batches every reader has read dropped first."""
        return self._read_dropped(nbytes, free) - nbytes

    def _read_dropped(self, nbytes: int, free: int) -> int:
        """`free` after dropping batches every reader has read, as many as `nbytes` need."""
        if nbytes > free:
            free += self.evict(nbytes - free, keep=None, deadline=NOT_NEEDED, unread_too=False)
        return free

    def reserve_buffer(self, key: ViewKey, free: int, *, demanded: bool) -> tuple[bool, int]:
        """Room for the batch `key` in memory (evicting ready ones if need be). A batch a
        reader is blocked on goes over the limit only when nothing else will free memory.
        A read batch's buffer of its size is taken first, memory short or not: that memory is
        counted already and its pages are mapped, where a new buffer's fresh pages cost this
        VM 0.6-1.8 s a GiB to touch (a cold run's daemon: 3.6 CPU-s instead of 4.2,
        docs/performance.md#fresh-pages). A read batch is then gone for whoever reads it again (it
        is built again, from disk if its clips are there), as it was once memory ran short."""
        state = self.board.views.state(key)
        if state.buffer is not None:
            return True, free
        cost = state.nbytes
        if self.board.reuse_buffer(key, spare_last_read=cost <= free):
            return True, free
        if cost > free:
            free += self.evict(cost - free, keep=key, deadline=self.book.deadline_of(key),
                               unread_too=self.near(key, demanded=demanded))
        if cost > free and (not demanded or self.frees_soon()):
            return False, free
        return True, free - cost

    def near(self, key: ViewKey, *, demanded: bool) -> bool:
        """Is the batch needed soon enough to take memory from unread batches needed later
        (`may_displace`), and to be read back from disk into memory?"""
        return may_displace(self.book.deadline_of(key), demanded=demanded,
                            iterations_in_memory=self.iterations_in_memory())

    def horizon(self) -> int:
        """Batches needed within this many iterations are `near` (demanded ones always)."""
        return displace_horizon(self.iterations_in_memory())

    def iterations_in_memory(self) -> int:
        """How many iterations of every task's batches the limit holds (asked at every
        dispatch: kept while the same tasks run, by the book's generation; holding their
        plans to compare kept an ended task's plan alive)."""
        if self._iterations[0] != self.book.generation:
            per_iteration = sum(plan.view_nbytes(0, 0) for plan in self.book.plans.values())
            self._iterations = (self.book.generation,
                                self.limit_bytes // max(1, per_iteration))
        return self._iterations[1]

    def evict(self, needed_bytes: int, *, keep: ViewKey | None, deadline: int,
              unread_too: bool) -> int:
        """`BatchBoard.evict`, unread batches dropped planned again; the bytes freed."""
        freed, unread = self.board.evict(needed_bytes, keep=keep, deadline=deadline,
                                         deadline_of=self.book.deadline_of,
                                         unread_too=unread_too)
        for key in unread:
            self._replan_evicted(key)
        return freed

    def _replan_evicted(self, key: ViewKey) -> None:
        """An unread batch left memory: plan it again (its clips may still be on disk)."""
        found = self.book.view(key)
        if found is not None:
            window, view = found
            store = self.store
            self.board.replan(key, window, view, self.book.windows[window].readers[key],
                              lambda use, info: store is not None
                              and clip_object_key(use, info) in store)
