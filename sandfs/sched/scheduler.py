"""The materialization executor: keeps batches ready ahead of the trainers (SAND §5.4).

A *job* is one video in one k-epoch window: one selective decode pass over the union of the
frames its pending clips need (all tasks, all epochs of the window), then every clip is
augmented and written straight into its slot of the batch buffer it belongs to. A batch whose
slots are all filled is ready. The trio task here decides what runs next (policy.py) and hands
the work to worker threads; nothing in this loop blocks.

Memory: ready and partially filled batches, plus the frames of running jobs, stay within
`memory_limit_bytes`. Past that, ready batches are dropped — those every reader has read first,
then those needed last — and a job only takes the clips that fit.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import trio

from sandfs.engine import ObjectFailed
from sandfs.materialize import Materializer, to_layout
from sandfs.npy import npy_buffer
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import ClipUse, VideoWork, WindowPlan, plan_window, view_key
from sandfs.sched.policy import NOT_NEEDED, JobState, pick_next, under_pressure
from sandfs.stats import Stats

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ViewBuffer:
    """A batch being filled slot by slot by the jobs of its videos."""

    data: bytearray
    array: np.ndarray
    missing: set[int]


@dataclass(slots=True)
class ReadyView:
    data: bytearray
    readers_left: set[str]  # tasks that will read it and have not yet


@dataclass(slots=True)
class Job:
    window: int
    work: VideoWork
    uses: list[ClipUse]
    frame_bytes: int

    @property
    def frames(self) -> set[int]:
        return {i for use in self.uses for i in use.clip.frame_indices}


@dataclass(slots=True)
class SchedulerState:
    """What status.json reports about the scheduler."""

    jobs_done: int = 0
    jobs_running: int = 0
    views_ready: int = 0
    evicted_unread: int = 0
    demand_waiting: int = 0
    failures: dict[tuple, str] = field(default_factory=dict)


class Scheduler:
    def __init__(self, plans: Sequence[TaskPlan], materializer: Materializer, stats: Stats, *,
                 workers: int, memory_limit_bytes: int, limiter: trio.CapacityLimiter) -> None:
        self.plans = {p.name: p for p in plans}
        self.materializer = materializer
        self.stats = stats
        self.workers = workers
        self.memory_limit_bytes = memory_limit_bytes
        self.limiter = limiter
        self.k_epochs = plans[0].k_epochs if plans else 1
        self.positions = {name: 0 for name in self.plans}  # global iteration index per task
        self.windows: dict[int, WindowPlan] = {}
        self.pending: dict[tuple[int, str], list[ClipUse]] = {}
        self.pending_views: Counter[tuple] = Counter()  # view -> clips no job has taken yet
        self.buffers: dict[tuple, ViewBuffer] = {}
        self.ready: OrderedDict[tuple, ReadyView] = OrderedDict()
        self.events: dict[tuple, trio.Event] = {}
        self.demanded: set[tuple] = set()
        self.running: dict[tuple[int, str], Job] = {}
        self.state = SchedulerState()
        self._wakeup = trio.Event()
        self._nursery: trio.Nursery | None = None

    # -- life cycle -------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._activate_windows()
            task_status.started()
            while True:
                self._dispatch()
                await self._wakeup.wait()
                self._wakeup = trio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    # -- what readers tell us ---------------------------------------------------------------

    def opened(self, task: str, epoch: int, iteration: int) -> None:
        plan = self.plans[task]
        self.positions[task] = epoch * plan.iterations_per_epoch + iteration
        self._activate_windows()
        self.wake()

    def ready_view(self, key: tuple, task: str) -> bytearray | None:
        ready = self.ready.get(key)
        if ready is None:
            return None
        ready.readers_left.discard(task)
        self.ready.move_to_end(key)
        return ready.data

    def is_planned(self, key: tuple) -> bool:
        """True when the view is ready or a job is making (or will make) it."""
        return key in self.ready or key in self.buffers or self.pending_views[key] > 0

    async def wait_view(self, key: tuple, task: str) -> bytearray | None:
        """Demand-feed: raise the view's jobs to the top and wait. None: no job will make it."""
        if key in self.state.failures:
            raise ObjectFailed(self.state.failures[key])
        if not self.is_planned(key):
            return None
        event = self.events.setdefault(key, trio.Event())
        self.demanded.add(key)
        self.state.demand_waiting += 1
        self.wake()
        try:
            await event.wait()
        finally:
            self.state.demand_waiting -= 1
        if key in self.state.failures:
            raise ObjectFailed(self.state.failures[key])
        return self.ready_view(key, task)

    def ready_ahead(self, task: str, count: int) -> int:
        plan = self.plans[task]
        position = self.positions[task]
        ahead = 0
        for step in range(1, count + 1):
            epoch, iteration = divmod(position + step, plan.iterations_per_epoch)
            if epoch >= plan.epochs:
                break
            ahead += view_key(plan, epoch, iteration) in self.ready
        return ahead

    def pending_jobs(self) -> list[tuple[int, str]]:
        return [key for key, uses in self.pending.items() if uses]

    @property
    def memory_bytes(self) -> int:
        ready = sum(len(r.data) for r in self.ready.values())
        filling = sum(len(b.data) for b in self.buffers.values())
        frames = sum(job.frame_bytes for job in self.running.values())
        return ready + filling + frames

    # -- windows ----------------------------------------------------------------------------

    def _activate_windows(self) -> None:
        """Plan each task's current and next window; forget windows every task has left."""
        wanted = set()
        for name, plan in self.plans.items():
            current = self.positions[name] // plan.iterations_per_epoch // self.k_epochs
            wanted |= {current, current + 1}
        wanted = {w for w in wanted if w * self.k_epochs < max(p.epochs for p in
                                                                 self.plans.values())}
        for window in sorted(wanted - set(self.windows)):
            self._add_window(window)
        for window in set(self.windows) - wanted:
            if window < min(wanted, default=0):
                del self.windows[window]
                for key in [k for k in self.pending if k[0] == window]:
                    for use in self.pending.pop(key):
                        self.pending_views[use.view] -= 1

    def _add_window(self, window: int) -> None:
        plan = plan_window(list(self.plans.values()), window)
        self.windows[window] = plan
        for path, work in plan.videos.items():
            uses = [u for u in work.uses if u.view not in self.ready]
            if uses:
                self.pending[(window, path)] = uses
                self.pending_views.update(u.view for u in uses)
        log.debug("window %d planned: %d videos, %d views", window, len(plan.videos),
                  len(plan.views))

    # -- choosing and starting jobs ---------------------------------------------------------

    def _deadline(self, use: ClipUse) -> int:
        ahead = [pos - self.positions[task] for task, pos in use.readers
                 if pos >= self.positions.get(task, 0)]
        return min(ahead, default=NOT_NEEDED)

    def _job_states(self):
        for (window, path), uses in self.pending.items():
            if (window, path) in self.running or not uses:
                continue
            work = self.windows[window].videos[path]
            yield JobState(
                key=f"{window}:{path}",
                demanded=any(u.view in self.demanded for u in uses),
                deadline_iterations=min(self._deadline(u) for u in uses),
                remaining_work=len({i for u in uses for i in u.clip.frame_indices}) + len(uses),
            ), (window, path), work

    def _dispatch(self) -> None:
        while len(self.running) < self.workers:
            states = {s.key: (s, k, w) for s, k, w in self._job_states()}
            pressure = under_pressure(self.memory_bytes, self.memory_limit_bytes)
            best = pick_next((s for s, _, _ in states.values()), memory_pressure=pressure)
            if best is None or (best.deadline_iterations >= NOT_NEEDED and not best.demanded):
                return
            _, job_key, work = states[best.key]
            job = self._admit(job_key, work, demanded=best.demanded)
            if job is None:
                return
            self._start(job_key, job)

    def _admit(self, job_key, work: VideoWork, *, demanded: bool) -> Job | None:
        """The pending uses of this job that fit in memory, most urgent first."""
        uses = sorted(self.pending[job_key], key=self._deadline)
        frame_bytes = len(work.frames) * work.info.width * work.info.height * 3
        free = self.memory_limit_bytes - self.memory_bytes - frame_bytes
        taken, new_views = [], set()
        for use in uses:
            cost = 0
            if use.view not in self.buffers and use.view not in new_views:
                cost = self._view_nbytes(use.view, job_key[0])
            if cost > free:
                free += self._evict(cost - free, keep=use.view)
            if cost > free and not (demanded and use.view in self.demanded):
                continue
            free -= cost
            new_views.add(use.view)
            taken.append(use)
        return Job(job_key[0], work, taken, frame_bytes) if taken else None

    def _view_nbytes(self, key: tuple, window: int) -> int:
        plan, epoch, iteration = self.windows[window].views[key]
        return plan.view_nbytes(epoch, iteration)

    def _start(self, job_key, job: Job) -> None:
        taken = {(u.view, u.slot) for u in job.uses}
        self.pending[job_key] = [u for u in self.pending[job_key] if (u.view, u.slot) not in taken]
        self.pending_views.subtract(u.view for u in job.uses)
        for use in job.uses:
            if use.view not in self.buffers:
                plan, epoch, iteration = self.windows[job.window].views[use.view]
                view = plan.view_plan(epoch, iteration)
                data, array = npy_buffer(view.shape, view.dtype)
                self.buffers[use.view] = ViewBuffer(data, array, set(range(len(view.clips))))
        self.running[job_key] = job
        self.state.jobs_running = len(self.running)
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job_key, job, name=f"job {job_key}")

    async def _run(self, job_key, job: Job) -> None:
        arrays = {u.view: self.buffers[u.view].array for u in job.uses}
        try:
            await trio.to_thread.run_sync(self._materialize, job, arrays, limiter=self.limiter)
        except Exception as exc:  # a broken video: its views fail (EIO), nothing else does
            reason = f"{type(exc).__name__}: {exc}"
            log.error("video %s failed: %s", job.work.info.rel_path, reason)
            for use in job.uses:
                self._fail(use.view, reason)
        else:
            for use in job.uses:
                self._fill(use.view, use.slot)
        finally:
            del self.running[job_key]
            self.state.jobs_running = len(self.running)
            self.state.jobs_done += 1
            self.wake()

    def _materialize(self, job: Job, arrays: dict[tuple, np.ndarray]) -> None:
        """In a worker thread: one decode pass, then every clip into its slot."""
        frames = self.materializer.decode(job.work.info, job.frames)
        clips = self.materializer.augment_clips([use.clip for use in job.uses], frames,
                                                [len(use.readers) for use in job.uses])
        for use, clip in zip(job.uses, clips, strict=True):
            arrays[use.view][use.slot] = to_layout(clip, job.work.plan.sampling.layout)

    # -- completing views -------------------------------------------------------------------

    def _fill(self, key: tuple, slot: int) -> None:
        buffer = self.buffers.get(key)
        if buffer is None:
            return
        buffer.missing.discard(slot)
        if buffer.missing:
            return
        del self.buffers[key]
        readers = self._readers(key)
        self.ready[key] = ReadyView(buffer.data, readers)
        self.state.views_ready += 1
        self.stats.add("views_materialized")
        self._count_independent(key, len(readers) or 1)
        self.demanded.discard(key)
        event = self.events.pop(key, None)
        if event is not None:
            event.set()

    def _fail(self, key: tuple, reason: str) -> None:
        self.state.failures[key] = reason
        self.buffers.pop(key, None)
        for window_key, uses in self.pending.items():
            self.pending[window_key] = [u for u in uses if u.view != key]
        self.pending_views.pop(key, None)
        event = self.events.pop(key, None)
        if event is not None:
            event.set()

    def _readers(self, key: tuple) -> set[str]:
        for window in self.windows.values():
            if key in window.readers:
                return {task for task, _ in window.readers[key]}
        return set()

    def _count_independent(self, key: tuple, readers: int) -> None:
        for plan_window_ in self.windows.values():
            if key in plan_window_.views:
                plan, epoch, iteration = plan_window_.views[key]
                for _ in range(readers):
                    self.materializer.count_independent(plan, plan.view_plan(epoch, iteration))
                return

    def _evict(self, needed_bytes: int, *, keep: tuple) -> int:
        """Drop ready views to free memory: fully read ones (oldest first), then the ones whose
        next reader is furthest away. Returns the bytes freed."""
        freed = 0
        for key in [k for k, r in self.ready.items() if not r.readers_left and k != keep]:
            if freed >= needed_bytes:
                return freed
            freed += len(self.ready.pop(key).data)
        unread = sorted((k for k in self.ready if k != keep), key=self._view_deadline,
                        reverse=True)
        for key in unread:
            if freed >= needed_bytes:
                break
            freed += len(self.ready.pop(key).data)
            self.state.evicted_unread += 1
        return freed

    def _view_deadline(self, key: tuple) -> int:
        left = self.ready[key].readers_left
        deadlines = [
            pos - self.positions[task]
            for window in self.windows.values()
            for task, pos in window.readers.get(key, ())
            if task in left and pos >= self.positions[task]
        ]
        return min(deadlines, default=NOT_NEEDED)
