"""The view service: what the FUSE layer asks for, in plan terms (task, epoch, iteration, video,
frame, depth). It composes the task registry, the scheduler (batches prepared ahead), the
on-demand objects (frames, aug{D} views, recomputed batches) and status.json."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

import trio

from sandfs.bounds import LimitReached
from sandfs.cache import ObjectStore
from sandfs.cache.sizing import StoreSizing
from sandfs.config.condition import ConditionError
from sandfs.config.limits import DEFAULT_LIMITS, Limits
from sandfs.config.schema import TaskConfig
from sandfs.fileio import DAMAGED
from sandfs.materialize import Materializer
from sandfs.media.types import BadVideo, VideoInfo
from sandfs.ops import isolated
from sandfs.plan.frames import FramePlan
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.window import view_key
from sandfs.remote.stats import RemoteStats
from sandfs.sched.flights import ObjectFailed
from sandfs.sched.frameplanner import FramePlanner
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.sched.scheduler import Scheduler
from sandfs.sched.windows import Position
from sandfs.stats import Stats
from sandfs.status import (
    COUNTERS,
    EMPTY_CACHE,
    BadVideoStatus,
    FailureLog,
    MountStatus,
    ScanStatus,
    TaskStatus,
)
from sandfs.tasks import Admit, TaskRegistry, ignored_engine_note, refusal
from sandfs.threads import limiter

log = logging.getLogger(__name__)


class ViewService:
    def __init__(
        self,
        plans: Sequence[TaskPlan],
        *,
        engine: OnDemandObjects,
        stats: Stats,
        bad_videos: Sequence[BadVideo] = (),
        task_texts: dict[str, str] | None = None,
        memory_limit_bytes: int = 1 << 30,
        read_ahead: int = 8,
        store: ObjectStore | None = None,
        store_sizing: StoreSizing | None = None,
        decode_ahead: int = 0,
        checkpoint: Callable[[dict], None] | None = None,
        task_planner: Callable[[TaskConfig, dict[tuple, int]], TaskPlan] | None = None,
        admit: Admit | None = None,
        policy: str = "priority",
        prune_mode: str = "algorithm1",
        remote: Mapping[str, int] | None = None,
        started: float | None = None,
        scan_status: Callable[[], ScanStatus] | None = None,
        freezes_windows: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        execution: str = "threads",
        plan_ahead: int = 64,
    ) -> None:
        self.registry = TaskRegistry(plans, task_texts=task_texts, checkpoint=checkpoint,
                                     task_planner=task_planner, admit=admit, limits=limits)
        self.engine = engine  # objects made on demand
        self.stats = stats
        self.materializer = Materializer(stats)
        self.scheduler = Scheduler(plans, self.materializer, stats, workers=engine.workers,
                                   memory_limit_bytes=memory_limit_bytes, limiter=engine.limiter,
                                   store=store, decode_ahead=decode_ahead,
                                   on_window_planned=self.registry.window_planned,
                                   policy=policy, prune_mode=prune_mode,
                                   keeps_read=store_sizing is None or store_sizing.given,
                                   freezes_windows=freezes_windows,
                                   idle_after_s=limits.idle_after_s,
                                   windows_ahead=limits.windows_ahead_of_reads,
                                   execution=execution, plan_ahead=plan_ahead)
        self.store = store
        # None: the store keeps the budget it was opened with, and every clip pruning keeps
        self.store_sizing = store_sizing
        self.bad_videos = bad_videos  # a lazy scan's grow while serving (ScanBad)
        self.read_ahead = read_ahead  # how far status.json's ready_ahead looks
        # time.monotonic() when the mount began (its uptime counts from there): the daemon
        # mounts before it scans, and the service comes after the scan
        self.started = time.monotonic() if started is None else started
        self.scan_status = scan_status  # status.json's `scan` (None: no such section)
        # what fetching remote datasets at mount took (zeros for local ones)
        self.remote = dict(remote or RemoteStats().as_status())
        self.frames = FramePlanner(self.scheduler.failures)
        self.failures = FailureLog()  # reads answered with EIO, for status.json

    # the registry's records, as the FUSE layer reads them
    @property
    def tasks(self) -> dict[str, TaskPlan]:
        return self.registry.tasks

    @property
    def task_texts(self) -> dict[str, str]:
        return self.registry.task_texts

    @property
    def task_errors(self) -> dict[str, str]:
        return self.registry.task_errors

    @property
    def generations(self) -> dict[str, int]:
        return self.registry.generations

    @property
    def positions(self) -> Mapping[str, tuple[int, int]]:
        """(epoch, iteration) of each task; `position` for one."""
        positions = {name: self.position(name) for name in self.tasks}
        return {name: (p.epoch, p.iteration) for name, p in positions.items()}

    def position(self, task: str) -> Position:
        """Where the task stands (a task is one of `tasks` once the scheduler's book holds
        it: `TaskRegistry.joined`)."""
        return self.scheduler.position(task)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the scheduler until cancelled; it starts preparing views at once."""
        await self.scheduler.run(task_status=task_status)

    # -- tasks joining and leaving -----------------------------------------------------------

    async def add_task_file(self, file_name: str, text: str, writer: tuple[int, int]) -> None:
        """A YAML written to .sand/tasks/NAME.yaml (see `TaskRegistry.load_file`)."""
        await self.add_task(await self.registry.load_file(file_name, text, writer), text)

    async def add_task(self, cfg: TaskConfig, text: str) -> None:
        """Register a task on the live mount. Windows already planned keep what they share;
        the task's views are planned into them as they are, its epoch 0 into the window the
        leading task on its dataset is in."""
        plan = await self.registry.register(cfg, self.scheduler.position)
        try:
            await self.scheduler.add_plan(plan, added=partial(self.registry.joined, plan, text))
        except BaseException as exc:  # all or nothing: a refused task leaves no trace
            self.registry.withdraw(cfg.task)
            if cfg.task not in self.tasks:  # never served: it joined the coordination only
                plan.coordination.withdraw(cfg.task)  # as it was planned (plan_new_task)
            if not isinstance(exc, Exception):
                raise  # cancelled: the mount is stopping
            log.exception("task %s: planning it into the scheduler failed", cfg.task)
            if cfg.task in self.tasks:  # its generation stays counted: inodes handed out
                self.registry.remove(cfg.task)  # meanwhile are never reused
            await self.scheduler.remove_plan(cfg.task)
            raise refusal(cfg.task, exc) from exc
        await self._fit_store()
        log.info("task %s registered: %d videos, %d iterations/epoch", cfg.task,
                 len(plan.videos), plan.iterations_per_epoch)
        if note := ignored_engine_note(cfg):
            log.warning("%s", note)

    async def remove_task(self, name: str) -> None:
        """End a task: its views are no longer served and the objects only it needed are
        released (memory and disk)."""
        plan = self.registry.remove(name)
        self.frames.forget(name)
        self.stats.forget_task(name)
        await self.scheduler.remove_plan(name)
        await trio.to_thread.run_sync(self.registry.ended, plan, limiter=limiter("planning"))
        await self._fit_store()
        log.info("task %s ended", name)

    async def _fit_store(self) -> None:
        """A store that sizes itself follows the tasks (cache/sizing.py)."""
        if self.store is None or self.store_sizing is None or self.store_sizing.given:
            return
        size = self.store_sizing.store_bytes(self.scheduler.book.plans.values())
        if size != self.store.budget_bytes:
            await trio.to_thread.run_sync(self.store.resize, size, limiter=limiter("store"))

    # -- batch views -------------------------------------------------------------------------

    def view_state(self, task: str, epoch: int, iteration: int) -> str:
        key = view_key(self.tasks[task], epoch, iteration)
        state = self.scheduler.view_state(key)
        return self.engine.state(key) if state == "planned" else state

    def view_readers(self, task: str, epoch: int, iteration: int) -> int:
        """user.sand.readers: how many tasks read this view. Identical views of several tasks
        (a search's trials) are one object, and the page cache serves all but its first
        reader; a view with one reader gains nothing from it (`sandfs.reading`)."""
        sharing = self.tasks[task].sharing_key  # not view_key: a stat draws no window
        return sum(1 for plan in self.tasks.values()
                   if plan.sharing_key == sharing and epoch < plan.epochs
                   and iteration < plan.iterations_per_epoch)

    def opened_view(self, task: str, epoch: int, iteration: int) -> None:
        """A trainer opened this view: that is where the task stands (deadlines count from it).
        LimitReached, with a status.json failure, for one too far past the task's reads."""
        try:
            self.scheduler.opened(task, epoch, iteration)
        except LimitReached as exc:
            self.failures.record(task, f"{task}/{epoch}/{iteration}/view", str(exc))
            raise

    def released_view(self, task: str, epoch: int, iteration: int) -> bool:
        """A trainer closed a view it had opened. True when every task that reads the view has
        read it."""
        return self.scheduler.released(task, epoch, iteration)

    async def read_view(self, task: str, epoch: int, iteration: int) -> bytes | memoryview:
        plan = self.tasks[task]
        key = view_key(plan, epoch, iteration)
        data = self.scheduler.ready_view(key, task)
        if data is None:
            started = time.monotonic()
            data = await self.scheduler.wait_view(key, task)
            if data is None:  # not planned any more (evicted, or an old window): recompute
                self.stats.add("views_recomputed")
                data = await self.engine.get(key, self._view_compute(plan, epoch, iteration))
            self.stats.add_stall(task, time.monotonic() - started)
        self.stats.add_task(task, "views_served")
        self.scheduler.book.read(task, epoch)
        return data

    def view_read_from_page_cache(self, task: str, epoch: int, iteration: int) -> None:
        """A view was opened and closed with no read reaching us: the kernel's page cache had
        it (read through another task's path to the same object). Count it as read."""
        key = view_key(self.tasks[task], epoch, iteration)
        if self.scheduler.ready_view(key, task) is not None:
            self.stats.add_task(task, "views_served")
            self.scheduler.book.read(task, epoch)

    def _view_compute(self, plan: TaskPlan, epoch: int, iteration: int):
        return lambda: self.materializer.view_bytes(plan, self.view_plan(plan, epoch, iteration))

    def view_plan(self, plan: TaskPlan, epoch: int, iteration: int) -> ViewPlan:
        """The plan of one view; a view that cannot be planned (a condition failed) is
        recorded for status.json and raises ObjectFailed (EIO), for this view alone. A batch
        of an active window answers from the scheduler's board: resolving it again costs ~2 ms
        when it has left the plan's cache (thousands of videos)."""
        held = self.scheduler.board.held_view(view_key(plan, epoch, iteration))
        if held is not None:  # a search's trials share it: the same clips, under their names
            return held if held.task == plan.name else replace(held, task=plan.name)
        try:
            return plan.view_plan(epoch, iteration)
        except ConditionError as exc:
            self.scheduler.failures.record(plan.name, epoch, iteration, str(exc))
            raise ObjectFailed(str(exc)) from None

    def view_meta(self, task: str, epoch: int, iteration: int) -> dict:
        plan = self.tasks[task]
        return plan.view_meta(self.view_plan(plan, epoch, iteration))

    # -- frames and intermediate views -------------------------------------------------------

    async def plan_frames(self, task: str, video_index: int) -> None:
        """Plan, off the event loop, the aug{D} of this video's frames in the task's current
        epoch. When it returns (and until the caller's next await), `frame_plan` and
        `max_depth` of the video answer from memory; an ended task returns at once."""
        while task in self.tasks:
            plan, epoch = self.tasks[task], self.position(task).epoch
            await self.frames.plan(plan, epoch, video_index)
            if self.tasks.get(task) is plan and self.position(task).epoch == epoch:
                return  # else the task moved on (or was registered anew) meanwhile

    def frame_plan(self, task: str, video_index: int, frame: int, depth: int) -> FramePlan | None:
        """aug{depth} of this frame in the task's current epoch, or None if not planned
        (await `plan_frames` first, or this plans the video's views on the caller's thread)."""
        return self.frames.frame_plan(self.tasks[task], self.position(task).epoch, video_index,
                                      frame, depth)

    def max_depth(self, task: str, video_index: int, frame: int) -> int:
        return self.frames.max_depth(self.tasks[task], self.position(task).epoch, video_index,
                                     frame)

    async def read_frame(self, task: str, video_index: int, frame: int, fplan: FramePlan):
        info: VideoInfo = self.tasks[task].videos[video_index]
        key = ("frame", info.path, frame, fplan.source, fplan.ops)
        return await self.engine.get(
            key, lambda: self.materializer.frame_bytes(info, frame, fplan.ops, fplan.source)
        )

    # -- status ------------------------------------------------------------------------------

    def status_record(self) -> MountStatus:
        stats = self.stats
        tasks = {}
        for name, plan in self.tasks.items():
            position = self.position(name)
            failures = self.scheduler.failures.of(name)
            tasks[name] = TaskStatus(
                epoch=position.epoch, iteration=position.iteration,
                ready_ahead=self.scheduler.ready_ahead(name, self.read_ahead),
                views_served=stats.task_counts(name).get("views_served", 0),
                stall_seconds=round(stats.stall_seconds(name), 3), epochs=plan.epochs,
                iterations_per_epoch=plan.iterations_per_epoch, videos=len(plan.videos),
                failed_views=failures.failed_views, view_error=failures.first_reason,
                **label_counts(plan))
        bad = [BadVideoStatus(b.rel_path, b.reason, b.detail) for b in self.bad_videos]
        for plan in self.tasks.values():
            bad += [BadVideoStatus(b.rel_path, b.reason, b.detail, plan.name)
                    for b in plan.skipped]
        return MountStatus(
            uptime_seconds=time.monotonic() - self.started, pid=os.getpid(),
            workers=self.engine.workers, ondemand_memory_bytes=self.engine.memory_bytes,
            ondemand_memory_limit_bytes=self.engine.memory_budget_bytes,
            ondemand_waiting=self.engine.demand_waiting, scheduler=self.scheduler.status(),
            tasks=tasks, counters={key: stats.get(key) for key in COUNTERS},
            cache=EMPTY_CACHE if self.store is None else self.store.stats(),
            bad_videos=tuple(bad), task_errors=dict(self.task_errors), remote=self.remote,
            isolated_ops=isolated.status(),
            failures=self.failures.entries() + self.registry.state_failures(),
            failures_total=self.failures.total, state_files_rebuilt=DAMAGED.count,
            scan=None if self.scan_status is None else self.scan_status(),
            execution="threads" if self.scheduler.pool is None else "processes")

    def status(self) -> dict:
        return self.status_record().to_json()

    def status_for(self, viewer: int | None = None) -> MountStatus:
        """The mount's state as user `viewer` may see it (None: all of it)."""
        record = self.status_record()
        if viewer is not None:
            record = record.seen_by(*self.registry.visible(viewer))
        return record

    def status_bytes(self, viewer: int | None = None) -> bytes:
        return self.status_for(viewer).to_bytes()


def label_counts(plan: TaskPlan) -> dict[str, int]:
    """What status.json says of a task's labels CSV (zeros without one)."""
    found = plan.label_match
    if found is None:
        return {}
    return {"videos_without_label": found.videos_without_label,
            "label_rows_without_video": found.rows_without_video}
