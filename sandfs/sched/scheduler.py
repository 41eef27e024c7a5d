"""The materialization executor: keeps batches ready ahead of the trainers (SAND §5.3, §5.4).

It composes the window book (tasks, positions, windows), the window planner (which windows
and tasks' parts are planned: `planning.py`), the batch board (batches from planned to ready),
the carry book (frames decoded ahead for later windows), the memory ledger (what a job may take
against `memory_limit_bytes`), admission (what a job takes when it starts) and the job records
that worker threads run (`work.py`); `choosing.py` picks the next job by `policy.py`. Nothing
in the trio loop blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from types import MappingProxyType

import numpy as np
import trio

from sandfs.cache import ObjectStore
from sandfs.config.limits import DEFAULT_LIMITS
from sandfs.config.settings import EXECUTION_MODES
from sandfs.execution.pool import JobPool
from sandfs.execution.shm import shared_empty
from sandfs.faults import fault_point
from sandfs.materialize import Materializer
from sandfs.plan.failures import ViewFailures
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import ViewKey
from sandfs.sched import joining, planning, work
from sandfs.sched.admission import Admission
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.choosing import JobChooser
from sandfs.sched.idle import rest_idle_tasks
from sandfs.sched.jobs import AssemblyJob, Job, JobResult, VideoJob, VideoJobKey
from sandfs.sched.memory import MemoryLedger
from sandfs.sched.objects import PRUNE_MODES
from sandfs.sched.passes import PassBook, Step
from sandfs.sched.policy import NOT_NEEDED, POLICIES
from sandfs.sched.reads import ReaderSide
from sandfs.sched.windows import WindowBook
from sandfs.stats import Stats
from sandfs.status import SchedulerStatus

log = logging.getLogger(__name__)


class Scheduler(ReaderSide):
    def __init__(self, plans: Sequence[TaskPlan], materializer: Materializer, stats: Stats, *,
                 workers: int, memory_limit_bytes: int, limiter: trio.CapacityLimiter,
                 store: ObjectStore | None = None, decode_ahead: int = 0,
                 on_window_planned: Callable[[], None] | None = None,
                 policy: str = "priority", prune_mode: str = "algorithm1",
                 keeps_read: bool = True, freezes_windows: bool = False,
                 idle_after_s: float = DEFAULT_LIMITS.idle_after_s,
                 windows_ahead: int = DEFAULT_LIMITS.windows_ahead_of_reads,
                 execution: str = "threads", plan_ahead: int = 64) -> None:
        """`freezes_windows`: in the daemon, planned windows are frozen out of the cyclic
        collector's walks (`runtime.settle_collector`), which changes the collector for the
        whole process. `idle_after_s`: another user's task none of whose views was opened for
        that long makes nothing ahead until read again (`WindowBook.idle`); `windows_ahead`:
        how far past its reads such a task may open views (`WindowBook.too_far`).
        `execution`: where video jobs run (`sandfs.execution`)."""
        if policy not in POLICIES:
            raise ValueError(f"scheduling policy: expected one of {sorted(POLICIES)}, "
                             f"got {policy!r}")
        if prune_mode not in PRUNE_MODES:
            raise ValueError(f"prune mode: expected one of {list(PRUNE_MODES)}, "
                             f"got {prune_mode!r}")
        if execution not in EXECUTION_MODES:  # `auto` is resolved with the settings
            raise ValueError(f"execution: expected one of {list(EXECUTION_MODES)}, "
                             f"got {execution!r}")
        self.policy = policy  # "fifo": the ablation
        self.idle_after_s, self.windows_ahead = idle_after_s, windows_ahead
        # processes: video jobs run in worker processes, on batch buffers in shared memory
        self.pool = JobPool(workers) if execution == "processes" else None
        self.tools = work.Tools(materializer, store, stats)
        self.store = store
        self.stats = stats
        self.workers = workers
        self.limiter = limiter
        self.book = WindowBook(list(plans))
        self.board = BatchBoard(shared_empty if self.pool is not None else None)
        self.failures = ViewFailures()
        self.carry = CarryBook(store, memory_limit_bytes=memory_limit_bytes,
                               decode_ahead=decode_ahead)
        # written here only (`_start`, `_finish`); the ledger and admission read it
        self.running: dict[VideoJobKey | ViewKey, Job] = {}
        running = MappingProxyType(self.running)
        self.passes = PassBook(workers)  # paused jobs stay in `running`: they hold memory
        self.memory = MemoryLedger(memory_limit_bytes, book=self.book, board=self.board,
                                   carry=self.carry, running=running, store=store,
                                   shared=self.pool.shared_bytes if self.pool else None)
        self.admit = Admission(book=self.book, board=self.board, carry=self.carry,
                               memory=self.memory, running=running,
                               keeps_on_disk=store is not None, keeps_read=keeps_read)
        self.chooser = JobChooser(book=self.book, board=self.board, carry=self.carry,
                                  memory=self.memory, passes=self.passes, running=running,
                                  policy=policy)
        self.jobs_done = 0
        self._refused = False  # the last dispatch left a worker free: admission refused its job
        self.rebuilt_from_disk = 0
        self._wakeup = trio.Event()
        self.planner = planning.WindowPlanner(
            self.book, self.board, self.carry, self.failures, store, prune_mode, wake=self.wake,
            on_window_planned=on_window_planned, while_planning=self._dispatch_for_blocked_readers,
            freezes_windows=freezes_windows, plan_ahead=plan_ahead, idle=self._idle)
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        # a hand-over that failed in the loop (a bug): its job fails when it ends, not the loop
        self._lost_parts: dict[VideoJobKey, BaseException] = {}

    # -- life cycle -------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        try:
            await self._serve(task_status)
        finally:
            if self.pool is not None:
                self.pool.close()

    async def _serve(self, task_status) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = self.planner.nursery = nursery
            nursery.start_soon(rest_idle_tasks, self.book, self.planner, self.idle_after_s,
                               self.wake)
            for _ in range(self.workers if self.pool is not None else 0):
                nursery.start_soon(self._warm_worker)
            first = await self.planner.activate()  # serving before a slow window's next
            task_status.started()
            while True:
                fault_point("scheduler")  # the loop itself: the daemon must stop, cleanly
                await self._activate_windows(first)
                self._dispatch()
                await self._next_wakeup()
                first = await self.planner.activate()

    async def _warm_worker(self) -> None:
        """A job worker process started while the first window is planned (an interpreter
        takes 0.3 CPU-s to start): a failure here is the first job's to report."""
        try:
            await trio.to_thread.run_sync(self.pool.warm, abandon_on_cancel=True)
        except Exception as exc:
            log.warning("starting a job worker process failed: %s", exc)

    def wake(self) -> None:
        self._wakeup.set()

    async def _next_wakeup(self) -> None:
        """Until `wake`. The main loop and the dispatcher beside a planning thread may wait
        together: the event is replaced once, by whichever sees it first, so that neither is
        left waiting on one no `wake` sets again."""
        event = self._wakeup
        await event.wait()
        if self._wakeup is event:
            self._wakeup = trio.Event()

    def pending_jobs(self) -> list[VideoJobKey]:
        return self.board.pending_jobs()

    @property
    def memory_bytes(self) -> int:
        return self.memory.used_bytes

    @property
    def memory_limit_bytes(self) -> int:
        return self.memory.limit_bytes

    def status(self) -> SchedulerStatus:
        return SchedulerStatus(
            jobs_done=self.jobs_done, jobs_running=len(self.running),
            workers_active=self._in_threads(), views_ready=len(self.board.ready),
            views_planned=len(self.board.views), evicted_unread=self.board.evicted_unread,
            rebuilt_from_disk=self.rebuilt_from_disk, demand_waiting=self.board.demand_waiting,
            pending_jobs=self.board.pending_count(), memory_bytes=self.memory_bytes,
            memory_limit_bytes=self.memory_limit_bytes,
            windows_in_parts=tuple(sorted(self.book.rest_pending)))

    # -- windows and tasks (WindowPlanner) ---------------------------------------------------

    async def _activate_windows(self, first: set[ViewKey]) -> None:
        """Plan the wanted windows, making the first batches of one slow to plan before the
        next is planned (`WindowPlanner.activate`)."""
        while first:
            await self._make_first_batches(first)
            first = await self.planner.activate()

    async def _dispatch_for_blocked_readers(self) -> None:
        """Beside each planning thread (`WindowPlanner.while_planning`): the jobs of batches
        readers are blocked on. Planning a window of 10,000 videos takes 2 s, and a task that
        joined then waited for it to its first batch. Other jobs wait: started before the
        window is planned, they would carry nothing for it. Beside a part swept from a
        window's start (no reader waits), every job: its videos are none of theirs, and parts
        swept back to back left the workers idle."""
        while True:
            if self.planner.sweeping:
                self._dispatch()
            elif self.board.demand_waiting:
                self._dispatch(demanded_only=True)
            await self._next_wakeup()

    async def _make_first_batches(self, first: set[ViewKey]) -> None:
        """Run only the jobs of batches readers wait for (or are anticipated at) until the
        first batches are made, or fail, or no job can run."""
        with trio.move_on_after(joining.FIRST_BATCHES_WAIT_S):
            while any(k in self.board.views and not self.board.flights.failed(k)
                      for k in first):
                self._dispatch(demanded_only=True)
                if not self.running:
                    return
                await self._next_wakeup()

    async def add_plan(self, plan: TaskPlan, added: Callable[[], None] | None = None) -> None:
        """Plan a new task into the active windows (`WindowPlanner.add_plan`)."""
        await self.planner.add_plan(plan, added)
        self.wake()

    async def remove_plan(self, name: str) -> None:
        """Forget a task: views no other task reads are released, in memory and on disk."""
        await self.planner.remove_plan(name)
        self.wake()

    # -- choosing and starting jobs ---------------------------------------------------------

    def _dispatch(self, *, demanded_only: bool = False) -> None:
        passes = self.passes
        self._gate_pauses()
        while self._in_threads() < self.workers:
            best, paused = self.chooser.best()
            if best is None or (not best.state.demanded and (
                    demanded_only or best.state.deadline_iterations >= NOT_NEEDED)):
                if passes.paused and not demanded_only:  # finish them, freeing their memory
                    self._resume(next(iter(passes.paused)))
                    continue
                return
            if best.paused:
                self._resume(best.key)
                continue
            job = None
            try:
                job = self._admitted(best.key, demanded=best.state.demanded)
                self._refused = job is None
                if job is not None:
                    self._start(job)
            except Exception as exc:  # one task's work: its batches fail, not the scheduler
                views = self._views_of(best.key) | (job.views if job is not None else set())
                self._work_failed(views, best.key, exc, in_loop=True)
                continue
            if job is None:
                if not paused:
                    return
                passes.no_job_took_the_worker()
                self._resume(min(paused, key=lambda c: c.state.deadline_iterations).key)

    def _admitted(self, job_key: VideoJobKey | ViewKey, *, demanded: bool) -> Job | None:
        fault_point("admission", self._tasks_of(job_key))
        if isinstance(job_key, VideoJobKey):
            return self.admit.video(job_key, demanded=demanded)
        return self.admit.assembly(job_key, demanded=demanded)

    def _views_of(self, job_key: VideoJobKey | ViewKey) -> set[ViewKey]:
        """The batches a job not started yet would make clips for."""
        if isinstance(job_key, ViewKey):
            return {job_key}
        return {u.view for u in self.board.pending.get(job_key, ())}

    def _tasks_of(self, job_key: VideoJobKey | ViewKey) -> set[str]:
        return {task for view in self._views_of(job_key) for task in self.book.readers_of(view)}

    def _work_failed(self, views: set[ViewKey], what: object, exc: Exception, *,
                     in_loop: bool = False) -> None:
        """A job (or its admission, start, or a batch's completion) raised: its batches fail
        (EIO; a read of one puts the reason in status.json), logged once with a bug's
        traceback when it raised in the trio loop; the other batches, tasks and the scheduler
        go on."""
        reason = f"{type(exc).__name__}: {exc}"
        log.error("job for %s failed: %s", what, reason,
                  exc_info=in_loop and not isinstance(exc, (OSError, MemoryError)))
        for view in views:
            self.board.fail(view, reason)

    def _idle(self) -> bool:
        """No batch waited for (or anticipated), a worker free and no job to give it
        (`_dispatch`'s test) or none admitted (memory full of batches ahead): the planner
        plans ahead. A joining task's first batch waited 1.9 s at 100,000 videos beside it."""
        if self.board.demanded or self._in_threads() >= self.workers:
            return False
        if self._refused:
            return True
        best, _ = self.chooser.best()
        return best is None or (not best.paused and not best.state.demanded
                                and best.state.deadline_iterations >= NOT_NEEDED)

    def _in_threads(self) -> int:
        return len(self.running) - len(self.passes.paused)

    def _readers_blocked(self) -> bool:
        """Some reader is blocked or expected: passes ask whether to pause."""
        return bool(self.board.demanded)

    def _gate_pauses(self) -> None:
        """Passes in worker processes ask only while the pool's gate is open, as a thread
        asks only while `_readers_blocked`: set at each dispatch, which a reader coming to
        wait wakes, before any job starts for it."""
        if self.pool is not None:
            self.pool.gate_pauses(self._readers_blocked())

    def _asks_to_pause(self, job: VideoJob) -> bool:
        """From a running video job's thread, between two steps. With no reader blocked (most
        steps) it answers without a round trip through the trio loop: reading whether the set
        is empty is safe from a thread, and a stale answer moves a pause by one step only."""
        return self._readers_blocked() and trio.from_thread.run_sync(self._pauses, job)

    def _pauses(self, job: VideoJob) -> bool:
        """In the trio loop, for `_asks_to_pause`: the answer, counted at once. Passes asking
        before this one has paused see it: counted only once paused, as many passes as
        asked together paused, and a pool of worker processes with fewer to spare than
        passes paused left the next job waiting for a worker."""
        if not (self.passes.room() and self._should_pause(job)):
            return False
        self.passes.will_pause(job.key)
        return True

    def _should_pause(self, job: VideoJob) -> bool:
        """In the trio loop, for `_pauses`: give the job's worker
        to a new job a blocked reader waits for (`PassBook`). A window's first batches need one
        clip from many videos; without pausing, each pass made all its clips for the window
        before the next began."""
        demanded = self.board.demanded
        return (self.passes.may_pause(job, self._in_threads(), demanded)
                and any(state.demanded and self.chooser.due(state, key)
                        for state, key in self.chooser.states()))

    def _resume(self, key: VideoJobKey) -> None:
        step = self.passes.resume(key)
        assert self._nursery is not None
        self._nursery.start_soon(self._run, self.running[key], step, name=f"job {key}")

    def _start(self, job: Job) -> None:
        """Claim the job's clips and buffers, and run it in a worker thread."""
        if isinstance(job, VideoJob):
            # the buffers first: a batch too large to allocate (MemoryError) fails alone, and
            # the pass goes on for the other tasks' batches
            targets, failed = self._buffers(job)
            if failed:
                job = job.without(set(failed))
                if not job.uses:
                    return
            self.board.take_pending(job.key, job.uses)
            if job.ahead_of is not None:
                self.board.take_pending(job.ahead_of, job.uses)
            self.carry.claim(job)
            # handed over without waiting for the loop: at 1,000 short videos the job threads
            # spent a sixth of their time waiting for it. The loop takes calls in the order
            # they come, the job's end (`_run`) after its last part
            assert self._token is not None
            report = partial(self._token.run_sync_soon, self._record_part, job)
            if self.pool is not None:  # the pass in a worker process
                steps = self.pool.steps(self.tools, job, targets, report)
            else:
                steps = work.JobSteps(work.video_steps(self.tools, job, targets, report))
            step = partial(steps.run, partial(self._asks_to_pause, job))
        else:
            fault_point("job_start", self.book.readers_of(job.key))
            step = partial(work.assemble, self.tools, job, {job.key: self.board.buffer(job.key)})
        self.running[job.key] = job
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job, step, name=f"job {job.key}")

    def _buffers(self, job: VideoJob) -> tuple[dict[ViewKey, np.ndarray], set[ViewKey]]:
        """The buffers of the batches the job fills in memory, and the batches whose buffer
        could not be had (failed now, each alone)."""
        targets, failed = {}, set()
        for view in {spot.view for spot in job.to_memory}:
            try:
                fault_point("job_start", self.book.readers_of(view))
                targets[view] = self.board.buffer(view)
            except Exception as exc:
                self._work_failed({view}, f"batch {view.epoch}/{view.iteration}", exc,
                                  in_loop=True)
                failed.add(view)
        return targets, failed

    async def _run(self, job: Job, step: Step) -> None:
        """Run a job (or its next steps) in a worker thread; paused, it waits in `paused`."""
        result, paused = None, False
        try:
            result = await trio.to_thread.run_sync(step, limiter=self.limiter)
            paused = result is None
            # the job fails at its end: a pass paused in a worker process holds it till then
            if not paused and isinstance(job, VideoJob) and job.key in self._lost_parts:
                raise self._lost_parts.pop(job.key)
            if not paused:
                self._record(job, result)
                self.carry.note_on_disk(result.saved, self._planned_windows())
        except Exception as exc:  # a broken video: its views fail (EIO), nothing else does
            what = job.work.info.rel_path if isinstance(job, VideoJob) else job.key
            self._work_failed(self.passes.unmade_views(job), what, exc)
        finally:
            if paused:  # a pause ends this run, not the job
                self.passes.pause(job.key, step)
            else:
                self._finish(job, result)
            self.wake()

    def _finish(self, job: Job, result: JobResult | None) -> None:
        del self.running[job.key]
        self.passes.ended(job.key)
        self.jobs_done += 1
        if result is not None and result.carried:  # written beside the workers
            nbytes = self.carry.hold(result.carried)
            self._nursery.start_soon(self._keep_carried, job, result.carried, nbytes)
        elif isinstance(job, VideoJob):
            self.carry.release(job)

    async def _keep_carried(self, job: VideoJob, carried, nbytes: int) -> None:
        try:
            saved = await trio.to_thread.run_sync(work.save_carried, self.tools, job, carried,
                                                  limiter=self.carry.limiter)
            self.carry.note_on_disk(saved, self._planned_windows())
        except Exception:  # the later windows decode for themselves; nothing fails
            log.exception("keeping the frames of %s for later windows failed",
                          job.work.info.rel_path)
        finally:
            self.carry.written(job, nbytes)
            self.wake()

    def _planned_windows(self) -> set[int]:
        return set(self.book.windows) | set(self.book.future)

    # -- back in the trio loop --------------------------------------------------------------

    def _record_part(self, job: VideoJob, part: JobResult) -> None:
        """Clips a running video job made so far (its thread asks the loop to run this): a
        batch they complete is served at once. An error here would end the trio run: it is
        kept for the job's end instead, where the batches of the clips not recorded fail
        (handed over first, they were left neither made nor failed, their readers waiting)."""
        if job.key not in self.running or job.key in self._lost_parts:
            return
        try:
            self._record(job, part)
            self.passes.hand_over(job, part)
        except Exception as exc:
            log.exception("handing over clips of %s failed", job.work.info.rel_path)
            self._lost_parts[job.key] = exc

    def _record(self, job: Job, result: JobResult) -> None:
        recorded = self.board.record(job, result)
        if recorded.recomputed:
            self.stats.add("clips_recomputed", recorded.recomputed)
        if isinstance(job, AssemblyJob):
            self.rebuilt_from_disk += 1
        for view, reason in recorded.failed.items():  # reported for the tasks that read it
            for task in self.book.readers_of(view):
                self.failures.record(task, view.epoch, view.iteration, reason)
        for view in recorded.touched:
            try:
                self._complete_if_full(view)
            except Exception as exc:  # this batch fails; the job's others are made
                self._work_failed({view}, view, exc, in_loop=True)

    def _complete_if_full(self, key: ViewKey) -> None:
        fault_point("assembly", self.book.readers_of(key))
        state = self.board.complete_if_full(key, partial(self.book.readers_of, key))
        if state is None:
            return
        self.stats.add("views_materialized")
        self.tools.materializer.count_independent(
            state.plan, state.view, len(self.board.ready[key].readers_left) or 1)
