"""The materialization executor: keeps batches ready ahead of the trainers (SAND §5.3, §5.4).

It composes the window book (tasks, positions, windows), the batch board (batches from planned
to ready), the carry book (frames decoded ahead for later windows), the memory ledger (what
a job may take against `memory_limit_bytes`), admission (what a job takes when it starts) and
the job records that worker threads run (`work.py`); `policy.py` picks the next job. Nothing in
the trio loop blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial

import trio

from sandfs.cache import ObjectStore
from sandfs.materialize import Materializer
from sandfs.plan.failures import ViewFailures
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import ViewKey, WindowPlan, plan_window, view_key
from sandfs.sched import work
from sandfs.sched.admission import Admission
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.jobs import AssemblyJob, Job, JobResult, VideoJob, VideoJobKey
from sandfs.sched.memory import MemoryLedger
from sandfs.sched.objects import PRUNE_MODES, disk_plans, mark_read
from sandfs.sched.passes import PassBook, Step
from sandfs.sched.policy import (
    NOT_NEEDED,
    POLICIES,
    JobState,
    pick_next,
)
from sandfs.sched.windows import Position, WindowBook
from sandfs.stats import Stats
from sandfs.status import SchedulerStatus

log = logging.getLogger(__name__)

# A window that takes this long to plan (1,000 short videos: 0.2 s) has its first batches made
# before the next window is planned, when their videos are at most 1/FIRST_BATCHES_VIDEO_SHARE
# of the window's; never longer than FIRST_BATCHES_WAIT_S (docs/performance.md §26).
FIRST_BATCHES_FIRST_S = 0.1
FIRST_BATCHES_VIDEO_SHARE = 8
FIRST_BATCHES_WAIT_S = 5.0


class Scheduler:
    def __init__(self, plans: Sequence[TaskPlan], materializer: Materializer, stats: Stats, *,
                 workers: int, memory_limit_bytes: int, limiter: trio.CapacityLimiter,
                 store: ObjectStore | None = None, decode_ahead: int = 0,
                 on_window_planned: Callable[[], None] | None = None,
                 policy: str = "priority", prune_mode: str = "algorithm1",
                 keeps_read: bool = True) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduling policy: expected one of {sorted(POLICIES)}, "
                             f"got {policy!r}")
        if prune_mode not in PRUNE_MODES:
            raise ValueError(f"prune mode: expected one of {list(PRUNE_MODES)}, "
                             f"got {prune_mode!r}")
        self.policy = policy  # "fifo": the ablation
        self.prune_mode = prune_mode
        self.tools = work.Tools(materializer, store, stats)
        self.store = store
        self.stats = stats
        self.workers = workers
        self.limiter = limiter
        self.on_window_planned = on_window_planned
        self.book = WindowBook(list(plans))
        self.board = BatchBoard()
        self.failures = ViewFailures()
        self.carry = CarryBook(store, memory_limit_bytes=memory_limit_bytes,
                               decode_ahead=decode_ahead)
        self.running: dict[VideoJobKey | ViewKey, Job] = {}
        self.passes = PassBook(workers)  # paused jobs stay in `running`: they hold memory
        self.memory = MemoryLedger(memory_limit_bytes, book=self.book, board=self.board,
                                   carry=self.carry, running=self.running, store=store)
        self.admit = Admission(book=self.book, board=self.board, carry=self.carry,
                               memory=self.memory, running=self.running,
                               keeps_on_disk=store is not None, keeps_read=keeps_read)
        self.jobs_done = 0
        self.rebuilt_from_disk = 0
        self.anticipated: dict[str, ViewKey] = {}  # a task's next batch, before its reader came
        self._readers_came: set[str] = set()
        self._wakeup = trio.Event()
        self._window_added = trio.Event()  # set (and replaced) each time a window is planned
        self._first_batches: set[ViewKey] = set()  # made before the next window is planned
        self._pruning = trio.CapacityLimiter(1)  # one window's Algorithm 1 at a time
        self._nursery: trio.Nursery | None = None

    # -- life cycle -------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._activate_windows(serving=False)
            task_status.started()
            while True:
                await self._activate_windows()
                self._dispatch()
                await self._wakeup.wait()
                self._wakeup = trio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    # -- what readers tell us and ask -------------------------------------------------------

    def position(self, task: str) -> Position:
        return self.book.position(task)

    def opened(self, task: str, epoch: int, iteration: int) -> None:
        """A reader opened a view: the task stands there, unless it re-reads a ready view
        behind its position (a probe or a second reader must not drag the windows back)."""
        key = view_key(self.book.plans[task], epoch, iteration)
        moves = (self.book.index(task, epoch, iteration) >= self.book.positions[task]
                 or key not in self.board.ready)
        self.book.opened(task, epoch, iteration, moves=moves)
        self._reader_came(task)
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
                mark_read(self.store, key, *found[1])
        return ready.data

    def view_state(self, key: ViewKey) -> str:
        """user.sand.state: ready means in memory or complete on disk."""
        return self.board.state_of(key)

    async def wait_view(self, key: ViewKey, task: str) -> memoryview | None:
        """Demand-feed: raise the view's jobs to the top and wait. None: no job will make it."""
        flights = self.board.flights
        flights.check(key)
        if not self.board.is_planned(key):
            await self._window_planned(task, key.epoch)
        if not self.board.is_planned(key):
            return None
        self._reader_came(task)
        if key not in self.board.ready:
            event = flights.event(key)
            self.board.demanded.add(key)
            self.board.waiting[key] += 1
            self.wake()
            try:
                await event.wait()
            finally:
                self.board.waiting[key] -= 1
                if not self.board.waiting[key]:
                    del self.board.waiting[key]
        flights.check(key)
        return self.ready_view(key, task)

    async def _window_planned(self, task: str, epoch: int) -> None:
        """Wait while the window of the task's `epoch` is wanted but still being planned (a
        reader that just jumped there), or the task's part of it is (`add_plan`): computing
        its view on demand meanwhile would decode it twice."""
        window = self.book.window_of_task(task, epoch)
        while window is not None and (
                (window not in self.book.windows and window in self.book.wanted())
                or window in self.book.parts_pending.get(task, ())):
            self.wake()
            await self._window_added.wait()

    def ready_ahead(self, task: str, count: int) -> int:
        plan = self.book.plans[task]
        return sum(view_key(plan, epoch, iteration) in self.board.ready
                   for epoch, iteration in self.book.ahead(task, count))

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
            pending_jobs=len(self.pending_jobs()), memory_bytes=self.memory_bytes,
            memory_limit_bytes=self.memory_limit_bytes)

    # -- windows ----------------------------------------------------------------------------

    async def _activate_windows(self, *, serving: bool = True) -> None:
        """Plan the wanted windows; forget those behind them that no reader needs now (a
        window ahead of the tasks, planned for a reader that jumped there, stays). After a
        window slow to plan, its first batches are made before the next window is planned
        (`_first_batches_first`); before the mount serves, that waits for the mount."""
        wanted = self.book.wanted()
        for window in sorted(wanted - set(self.book.windows)):
            if self._first_batches:
                if not serving:
                    return
                await self._make_first_batches()
            started = trio.current_time()
            planned = await trio.to_thread.run_sync(self._plan_window, window)
            self._add_window(planned)
            self._first_batches = self._first_batches_first(planned.plan,
                                                            trio.current_time() - started)
        for window in [w for w in self.book.windows if w < min(wanted, default=0)]:
            self._drop_window(window)
        await self._plan_future()

    def _first_batches_first(self, plan: WindowPlan, planning_s: float) -> set[ViewKey]:
        """The batches waited for (or anticipated) in a window that took FIRST_BATCHES_FIRST_S
        or more to plan, when their videos are few next to the window's: planning the next
        window would take as long again before their passes could start. Their passes carry
        nothing for the next window, which decodes those few videos again."""
        if planning_s < FIRST_BATCHES_FIRST_S:
            return set()
        keys = {k for k in self.board.demanded if k in plan.views and k in self.board.views}
        videos = {c.video_index for k in keys for c in self.board.views[k].plan.view_plan(
            k.epoch, k.iteration).clips}
        few = len(videos) * FIRST_BATCHES_VIDEO_SHARE <= len(plan.videos)
        return keys if few else set()

    async def _make_first_batches(self) -> None:
        """Run only the jobs of batches readers wait for (or are anticipated at) until the
        first batches are made, or fail, or no job can run."""
        first, self._first_batches = self._first_batches, set()
        with trio.move_on_after(FIRST_BATCHES_WAIT_S):
            while any(k in self.board.views and not self.board.flights.failed(k)
                      for k in first):
                self._dispatch(demanded_only=True)
                if not self.running:
                    return
                await self._wakeup.wait()
                self._wakeup = trio.Event()

    def _plan_window(self, window: int) -> work.PlannedWindow:
        """In a thread: the window's plan, what is on disk, and what to keep there."""
        planned = work.plan_active_window(list(self.book.plans.values()), window, self.store,
                                          self.prune_mode)
        if self.on_window_planned is not None:
            self.on_window_planned()
        return planned

    async def _plan_future(self) -> None:
        """Plan the windows a pass may carry for after each active one (`CarryBook.span`), for
        no other use than carrying their frames: a job of the next window, started early,
        carries for the windows after it."""
        book = self.book
        horizon = book.horizon(self.carry.span) if self.store is not None else set()
        gone = set(book.future) - horizon  # active now, or behind every task
        if gone:
            book.future = {w: p for w, p in book.future.items() if w in horizon}
            self.carry.forget(gone - set(book.windows))
        for window in sorted(horizon - set(book.future)):
            plans = list(book.plans.values())
            book.future[window] = await trio.to_thread.run_sync(plan_window, plans, window)

    def _add_window(self, planned: work.PlannedWindow) -> None:
        plan, window = planned.plan, planned.plan.window
        self.book.windows[window] = plan
        self._note_window_added()
        self.board.add_window(planned)
        if planned.to_prune:
            self._nursery.start_soon(self._prune, plan)
        self._anticipate(plan)
        self._fail_views(plan)
        self.carry.frames_on_disk |= {VideoJobKey(window, p) for p in planned.frames_on_disk}
        log.debug("window %d planned: %d videos, %d views, %d clips on disk", window,
                  len(plan.videos), len(plan.views), len(planned.on_disk))

    async def _prune(self, plan: WindowPlan) -> None:
        """Algorithm 1 for a window whose clips do not all fit on disk, beside its first jobs
        (10,000 short videos: 6.5 s before the mount could serve). Jobs started meanwhile keep
        the soonest clips that fit; the others follow pruning. One window at a time: its
        graphs take hundreds of MB at that size. Abandoned at shutdown."""
        try:
            kept = await trio.to_thread.run_sync(
                disk_plans, plan, self.store.budget_bytes, self.prune_mode,
                abandon_on_cancel=True, limiter=self._pruning)
        except Exception:
            log.exception("window %d: pruning failed; its jobs keep the soonest clips that fit",
                          plan.window)
            return
        if self.book.windows.get(plan.window) is plan:
            self.board.refine_disk_plans(plan.window, kept)

    def _note_window_added(self) -> None:
        """Wake the readers waiting for a window (or a task's part of one)."""
        self._window_added.set()
        self._window_added = trio.Event()

    def _anticipate(self, plan: WindowPlan) -> None:
        """Until a task's reader comes, the batch where the task stands counts as waited for
        once its window is planned: the reader comes soon (a training script that starts with
        the mount is still importing torch), and the passes that batch needs should not make
        later epochs' clips first (`_should_pause`): a cold mount's first batch came 0.07 s
        sooner (docs/performance.md §22)."""
        for task, task_plan in self.book.plans.items():
            at = self.book.position(task)
            key = view_key(task_plan, at.epoch, at.iteration)
            if (task not in self._readers_came and key in plan.views
                    and key not in self.board.ready):
                self.board.demanded.add(key)
                self.anticipated[task] = key

    def _reader_came(self, task: str) -> None:
        """The task's reader opened or waits for a view: its own demand counts from now on.
        The batch it was anticipated at stays demanded while another task still anticipates it
        or a reader waits for it: a search's trials share their batches, and a trial opening
        the batch another one was blocked on took that reader's demand away (its own read
        waits in the kernel for the pages the first reader's is filling, never asking us)."""
        self._readers_came.add(task)
        key = self.anticipated.pop(task, None)
        if (key is not None and key not in self.anticipated.values()
                and not self.board.waiting[key]):
            self.board.demanded.discard(key)

    def _fail_views(self, plan: WindowPlan) -> None:
        """Views that could not be planned fail for their readers: EIO, reported per task."""
        for key, failed in plan.failed.items():
            self.board.fail(key, failed.reason)
            for task, _ in failed.readers:
                self.failures.record(task, key.epoch, key.iteration, failed.reason)

    def _drop_window(self, window: int) -> None:
        plan = self.book.windows.pop(window)
        self.carry.forget({window})
        self.board.drop_window(window, plan.views)

    # -- tasks joining and leaving ----------------------------------------------------------

    async def add_plan(self, plan: TaskPlan) -> None:
        """Plan a new task into the active windows (and the windows to come), the window it
        starts in first. When that took long (`_first_batches_first`) it returns then: the
        other windows get their part once the task's first batch is made, and a reader that
        gets there sooner waits for it (`_window_planned`)."""
        self.carry.forget(self.book.future)
        self.book.add_task(plan)
        start = self.book.window_of_task(plan.name, 0)
        windows = sorted(self.book.windows, key=lambda w: (w != start, w))
        first = await self._add_part(plan, windows[0]) if windows else set()
        if first and windows[1:]:
            self.book.parts_pending[plan.name] = set(windows[1:])
            self._nursery.start_soon(self._add_later_parts, plan, windows[1:], first)
        else:
            for window in windows[1:]:
                await self._add_part(plan, window)
        self.wake()

    async def _add_part(self, plan: TaskPlan, window: int) -> set[ViewKey]:
        """The task's part of an active window; the batches to make before planning more."""
        started = trio.current_time()
        known = frozenset(self.book.windows[window].views)  # shared views: readers only
        part, on_disk = await trio.to_thread.run_sync(work.plan_task_part, plan, window,
                                                      self.store, known)
        if self.book.plans.get(plan.name) is not plan or window not in self.book.windows:
            return set()  # the task was removed, or the window dropped, meanwhile
        if not known.isdisjoint(part.views) and not known.intersection(part.views) <= set(
                self.book.windows[window].views):  # a shared view was released meanwhile
            part, on_disk = await trio.to_thread.run_sync(work.plan_task_part, plan, window,
                                                          self.store)
            if self.book.plans.get(plan.name) is not plan or window not in self.book.windows:
                return set()
        self.board.add_part(window, self.book.merge(window, part), on_disk)
        self._anticipate(part)
        self._fail_views(part)
        return self._first_batches_first(part, trio.current_time() - started)

    async def _add_later_parts(self, plan: TaskPlan, windows: list[int],
                               first: set[ViewKey]) -> None:
        """`add_plan`'s other windows, after the task's first batches (at most
        FIRST_BATCHES_WAIT_S). A failure leaves their views to be made on demand."""
        with trio.move_on_after(FIRST_BATCHES_WAIT_S):
            for key in first:
                if key in self.board.views:
                    await self.board.flights.event(key).wait()
        try:
            for window in windows:
                if self.book.plans.get(plan.name) is not plan:
                    return  # removed meanwhile
                if window in self.book.windows:
                    await self._add_part(plan, window)
                self.book.parts_pending[plan.name].discard(window)
                self._note_window_added()
        except Exception:
            if self.book.plans.get(plan.name) is plan:  # else removed while planned: no loss
                log.exception("task %s: planning windows %s failed; their views are made on "
                              "demand", plan.name, windows)
        finally:
            if self.book.plans.get(plan.name) is plan:
                self.book.parts_pending.pop(plan.name, None)
            self._note_window_added()
            self.wake()

    async def remove_plan(self, name: str) -> None:
        """Forget a task: views no other task reads are released, in memory and on disk."""
        self.carry.forget(self.book.future)
        released = self.book.remove_task(name)
        self.failures.forget(name)
        self.anticipated.pop(name, None)  # its batch is dropped below, or another task's too
        self._readers_came.discard(name)  # the name may be registered again
        self.board.forget_pending(set(released))
        for key in released:
            self.board.drop(key, ready_too=True)
        for ready in self.board.ready.values():
            ready.readers_left.discard(name)
        if self.store is not None:
            await trio.to_thread.run_sync(work.release_clips, self.store, released)
        self.wake()

    # -- choosing and starting jobs ---------------------------------------------------------

    def _job_states(self):
        return self.board.job_states(set(self.running) | self.carry.carried, self.book.deadline_of,
                                     self.memory.horizon())

    def _dispatch(self, *, demanded_only: bool = False) -> None:
        passes = self.passes
        while self._in_threads() < self.workers:
            options = {s.key: (s, k) for s, k in self._job_states() if self._due(s, k)}
            paused = {s.key: (s, k) for s, k in passes.states(self.running, self.book.deadline_of,
                                                               self.board.demanded)}
            best = pick_next((s for s, _ in (options | paused).values()),
                             memory_pressure=self.memory.under_pressure(), policy=self.policy)
            if best is None or (not best.demanded and (
                    demanded_only or best.deadline_iterations >= NOT_NEEDED)):
                if passes.paused and not demanded_only:  # finish them, freeing their memory
                    self._resume(next(iter(passes.paused)))
                    continue
                return
            if best.key in paused:
                self._resume(paused[best.key][1])
                continue
            job_key = options[best.key][1]
            job = (self.admit.video(job_key, demanded=best.demanded)
                   if isinstance(job_key, VideoJobKey)
                   else self.admit.assembly(job_key, demanded=best.demanded))
            if job is None:
                if not paused:
                    return
                passes.fruitless = True  # until a job ends and frees memory
                soonest = min(paused.values(), key=lambda o: o[0].deadline_iterations)
                self._resume(soonest[1])
                continue
            self._start(job)

    def _in_threads(self) -> int:
        return len(self.running) - len(self.passes.paused)

    def _asks_to_pause(self, job: VideoJob) -> bool:
        """From a running video job's thread, between two steps. With no reader blocked (most
        steps) it answers without a round trip through the trio loop: reading whether the set
        is empty is safe from a thread, and a stale answer moves a pause by one step only."""
        return bool(self.board.demanded) and trio.from_thread.run_sync(self._should_pause, job)

    def _should_pause(self, job: VideoJob) -> bool:
        """In the trio loop, for `_asks_to_pause`: give the job's worker
        to a new job a blocked reader waits for (`PassBook`). A window's first batches need one
        clip from many videos; without pausing, each pass made all its clips for the window
        before the next began."""
        demanded = self.board.demanded
        return (self.passes.may_pause(job, self._in_threads(), demanded)
                and any(state.demanded and self._due(state, key)
                        for state, key in self._job_states()))

    def _resume(self, key: VideoJobKey) -> None:
        step = self.passes.paused.pop(key)
        assert self._nursery is not None
        self._nursery.start_soon(self._run, self.running[key], step, name=f"job {key}")

    def _due(self, state: JobState, key: VideoJobKey | ViewKey) -> bool:
        """Can the job run now? Reading a batch back from disk waits until it is near: picked
        early (the shortest job under memory pressure) and refused, it held back every other
        job, and a window's first batches were not ready when the reader got there."""
        return isinstance(key, VideoJobKey) or self.memory.near(key, demanded=state.demanded)

    def _start(self, job: Job) -> None:
        """Claim the job's clips and buffers, and run it in a worker thread."""
        if isinstance(job, VideoJob):
            self.board.take_pending(job.key, job.uses)
            targets = {spot.view: self.board.buffer(spot.view) for spot in job.to_memory}
            self.carry.claim(job)
            report = partial(trio.from_thread.run_sync, self._record_part, job)
            steps = work.JobSteps(work.video_steps(self.tools, job, targets, report))
            step = partial(steps.run, partial(self._asks_to_pause, job))
        else:
            step = partial(work.assemble, self.tools, job, {job.key: self.board.buffer(job.key)})
        self.running[job.key] = job
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job, step, name=f"job {job.key}")

    async def _run(self, job: Job, step: Step) -> None:
        """Run a job (or its next steps) in a worker thread; paused, it waits in `paused`."""
        result, paused = None, False
        try:
            result = await trio.to_thread.run_sync(step, limiter=self.limiter)
            paused = result is None
        except Exception as exc:  # a broken video: its views fail (EIO), nothing else does
            reason = f"{type(exc).__name__}: {exc}"
            what = job.work.info.rel_path if isinstance(job, VideoJob) else job.key
            log.error("job for %s failed: %s", what, reason)
            for view in self.passes.unmade_views(job):
                self.board.fail(view, reason)
        else:
            if not paused:
                self._record(job, result)
                self.carry.note_on_disk(result.saved, self._planned_windows())
        finally:
            if paused:  # a pause ends this run, not the job
                self.passes.paused[job.key] = step
            else:
                self._finish(job, result)
            self.wake()

    def _finish(self, job: Job, result: JobResult | None) -> None:
        del self.running[job.key]
        self.passes.ended(job.key)
        self.jobs_done += 1
        if result is not None and result.carried:  # written beside the workers
            nbytes = sum(f.nbytes for fs in result.carried.values() for f in fs.values())
            self.carry.nbytes += nbytes
            self._nursery.start_soon(self._keep_carried, job, result.carried, nbytes)
        elif isinstance(job, VideoJob):
            self.carry.release(job)

    async def _keep_carried(self, job: VideoJob, carried, nbytes: int) -> None:
        try:
            saved = await trio.to_thread.run_sync(work.save_carried, self.tools, job, carried,
                                                  limiter=self.carry.limiter)
            self.carry.note_on_disk(saved, self._planned_windows())
        finally:
            self.carry.nbytes -= nbytes
            self.carry.release(job)
            self.wake()

    def _planned_windows(self) -> set[int]:
        return set(self.book.windows) | set(self.book.future)

    # -- back in the trio loop --------------------------------------------------------------

    def _record_part(self, job: VideoJob, part: JobResult) -> None:
        """Clips a running video job made so far (called from its thread): a batch they
        complete is served at once."""
        if job.key in self.running:
            self.passes.hand_over(job, part)
            self._record(job, part)

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
            self._complete_if_full(view)

    def _complete_if_full(self, key: ViewKey) -> None:
        state = self.board.complete_if_full(key, partial(self.book.readers_of, key))
        if state is None:
            return
        self.stats.add("views_materialized")
        view = state.plan.view_plan(state.epoch, state.iteration)
        for _ in range(len(self.board.ready[key].readers_left) or 1):
            self.tools.materializer.count_independent(state.plan, view)
