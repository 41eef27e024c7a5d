"""The materialization executor: keeps batches ready ahead of the trainers (SAND §5.3, §5.4).

Objects: a *clip* is one slot of one batch (leaf); its parents are decoded *frames*; their root
is the video. For each k-epoch window, pruning (Algorithm 1, `sandfs.cache.prune`) picks which
clips and frames to keep on disk under the storage budget.

Jobs, chosen by `policy.py` and run in worker threads (nothing in the trio loop blocks):
- a *video job*: one video, one window: its frames come from ONE selective decode pass (or from
  frames kept on disk), and every pending clip it takes is augmented once and written into its
  batch's slot in memory and/or to disk. It takes the clips whose batches fit in memory
  (`memory_limit_bytes`), plus those pruning keeps on disk; the rest wait for a later job.
- an *assembly job*: one batch whose clips are on disk (a restart, or batches beyond the memory
  horizon) read back into memory.
A batch with every slot filled is ready. Memory past the limit drops ready batches — those every
reader has read first, then those needed last — and they are rebuilt from disk, or recomputed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import networkx as nx
import numpy as np
import trio

from sandfs import ops as oplib
from sandfs.cache import ObjectKey, ObjectStore, prune
from sandfs.engine import ObjectFailed
from sandfs.materialize import (
    FrameKey,
    Materializer,
    Prefixed,
    clip_frame_keys,
    first_ops,
    to_layout,
)
from sandfs.media.decode import frames_to_decode
from sandfs.media.types import VideoInfo
from sandfs.npy import npy_buffer
from sandfs.ops.base import OpInstance
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import ClipUse, VideoWork, WindowPlan, plan_window, view_key
from sandfs.sched.policy import (
    AHEAD_TARGET,
    NOT_NEEDED,
    POLICIES,
    JobState,
    pick_next,
    under_pressure,
    workers_to_run,
)
from sandfs.stats import Stats

log = logging.getLogger(__name__)

PRUNE_TARGET_FRACTION = 0.7  # plan below the store's 75% eviction mark
BACKGROUND_NICE = 5  # added to worker threads' nice: they yield to FUSE and trainers on a busy CPU
CARRY_STORE_FRACTION = 0.5  # frames carried for later windows: while the store is below this
DECODE_SECONDS_PER_MPIXEL = 0.006  # cost model seeds (PERF-NOTES), refined by measurement
AUGMENT_SECONDS_PER_MPIXEL = 0.0015


_thread_state = threading.local()


def clip_object_key(use: ClipUse, info: VideoInfo) -> ObjectKey:
    return ObjectKey.of("clip", use.view, use.slot, info.path, info.size_bytes, info.mtime_ns)


def frame_object_key(info: VideoInfo, frame: FrameKey) -> ObjectKey:
    index, source = frame
    return ObjectKey.of("frame", info.path, info.size_bytes, info.mtime_ns, index, source)


def kept_frame_key(info: VideoInfo, frame: FrameKey, first: OpInstance | None) -> ObjectKey:
    """A frame kept for a later window: after `first`, the first op of all its clips there."""
    if first is None:
        return frame_object_key(info, frame)
    index, source = frame
    return ObjectKey.of("frame", info.path, info.size_bytes, info.mtime_ns, index, source,
                        (first.name, first.params, first.drawn))


def kept_frame(frame: np.ndarray, first: OpInstance | None) -> np.ndarray:
    return frame if first is None else oplib.apply_instance(first, [frame])[0]


def frame_nbytes(info: VideoInfo, frame: FrameKey) -> int:
    """RGB bytes of a decoded frame: full size, or its decode_resize."""
    height, width = frame[1][0] if frame[1] else (info.height, info.width)
    return height * width * 3


class Carry(NamedTuple):
    """Frames a decode pass makes for a later window of its video."""

    keys: set[FrameKey]
    deadline: int  # the window's first reader position
    firsts: dict[FrameKey, OpInstance]  # `first_ops` of its clips: frames are kept after them


@dataclass(slots=True)
class ViewState:
    """A batch of an active window: which slots are filled, in memory and on disk."""

    plan: TaskPlan
    epoch: int
    iteration: int
    slots: int
    on_disk: set[int] = field(default_factory=set)
    buffer: tuple[bytearray, np.ndarray] | None = None
    in_memory: set[int] = field(default_factory=set)


@dataclass(slots=True)
class ReadyView:
    data: bytearray
    readers_left: set[str]  # tasks that will read it and have not yet


@dataclass(slots=True)
class Job:
    kind: str  # "video" | "assemble"
    window: int
    key: object  # (window, path) for a video job, the view key for an assembly
    work: VideoWork | None = None
    uses: list[ClipUse] = field(default_factory=list)
    to_memory: set[tuple] = field(default_factory=set)  # (view, slot) written to buffers
    to_disk: set[tuple] = field(default_factory=set)  # (view, slot) persisted
    save_frames: bool = False
    frames_on_disk: bool = False
    frame_bytes: int = 0
    # frames later windows need from this video, decoded in this pass and kept on disk for
    # them (by window): their jobs read instead of decoding
    carry: dict[int, Carry] = field(default_factory=dict)
    deadlines: dict[tuple, int] = field(default_factory=dict)  # view -> first reader position
    layouts: dict[tuple, str] = field(default_factory=dict)  # view -> its task's layout
    assembly: tuple | None = None  # (plan, view plan, slots to read) of an assembly job
    # the batches it fills, as they were when it started: a batch dropped with its window (and
    # maybe planned again since, with a fresh buffer) no longer takes this job's results
    states: dict[tuple, ViewState] = field(default_factory=dict)

    @property
    def frames(self) -> set[FrameKey]:
        """What to decode: every frame of the window when they are to be kept on disk (later
        jobs of this video then read them instead of decoding), else what the clips need."""
        if self.save_frames and not self.frames_on_disk and self.work is not None:
            return self.work.frame_keys
        return {key for use in self.uses for key in clip_frame_keys(use.clip)}

    @property
    def decode_keys(self) -> set[FrameKey]:
        """What the decode pass produces: this window's frames and those it carries."""
        return self.frames.union(*(c.keys for c in self.carry.values()))


@dataclass(slots=True)
class DiskPlan:
    """What pruning keeps on disk for one video in one window."""

    clips: set[tuple] = field(default_factory=set)  # (view, slot)
    frames: bool = False


@dataclass(slots=True)
class SchedulerState:
    """What status.json reports about the scheduler."""

    jobs_done: int = 0
    evicted_unread: int = 0
    demand_waiting: int = 0
    rebuilt_from_disk: int = 0
    failures: dict[tuple, str] = field(default_factory=dict)


class Scheduler:
    def __init__(self, plans: Sequence[TaskPlan], materializer: Materializer, stats: Stats, *,
                 workers: int, memory_limit_bytes: int, limiter: trio.CapacityLimiter,
                 store: ObjectStore | None = None, decode_ahead: int = 0,
                 on_window_planned: Callable[[], None] | None = None) -> None:
        self.plans = {p.name: p for p in plans}
        self.materializer = materializer
        self.stats = stats
        self.workers = workers
        self.memory_limit_bytes = memory_limit_bytes
        self.limiter = limiter
        self.store = store
        self.decode_ahead = decode_ahead  # later windows a decode pass prepares frames for
        self.on_window_planned = on_window_planned
        self.policy = os.environ.get("SANDFS_SCHEDULING", "priority")  # "fifo": the ablation
        if self.policy not in POLICIES:
            raise ValueError(f"SANDFS_SCHEDULING: expected one of {sorted(POLICIES)}, "
                             f"got {self.policy!r}")
        self.positions = {name: 0 for name in self.plans}  # global iteration index per task
        # views open right now, per task (position -> count): readers behind the latest open
        # (a second trainer, a prefetching loader, a re-read) keep their windows planned
        self.open_positions: dict[str, Counter[int]] = {name: Counter() for name in self.plans}
        self.windows: dict[int, WindowPlan] = {}
        self.future: dict[int, WindowPlan] = {}  # windows further ahead: only to carry frames
        self.disk_plans: dict[tuple[int, str], DiskPlan] = {}
        self.pending: dict[tuple[int, str], list[ClipUse]] = {}  # clips not made yet
        self.views: dict[tuple, ViewState] = {}  # batches of active windows, not ready yet
        self.ready: OrderedDict[tuple, ReadyView] = OrderedDict()
        self.events: dict[tuple, trio.Event] = {}
        self.demanded: set[tuple] = set()
        self.running: dict[object, Job] = {}
        self.made: set[tuple] = set()  # (view, slot) made in this run: a second time = recompute
        self.frames_on_disk: set[tuple[int, str]] = set()  # (window, video) fully on disk
        self.carried: set[tuple[int, str]] = set()  # (window, video) a running job decodes
        self.carry_bytes = 0  # frames decoded for later windows, waiting to be written
        self.carry_limiter = trio.CapacityLimiter(1)
        self.state = SchedulerState()
        self._wakeup = trio.Event()
        self._window_added = trio.Event()  # set (and replaced) each time a window is planned
        self._nursery: trio.Nursery | None = None

    # -- life cycle -------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._activate_windows()
            task_status.started()
            while True:
                await self._activate_windows()
                self._dispatch()
                await self._wakeup.wait()
                self._wakeup = trio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    # -- what readers tell us ---------------------------------------------------------------

    def opened(self, task: str, epoch: int, iteration: int) -> None:
        """A reader opened a view: the task stands there, unless it re-reads a ready view
        behind its position (a probe or a second reader must not drag the windows back)."""
        plan = self.plans[task]
        position = epoch * plan.iterations_per_epoch + iteration
        if position >= self.positions[task] or view_key(plan, epoch, iteration) not in self.ready:
            self.positions[task] = position
        self.open_positions[task][position] += 1
        self.wake()

    def released(self, task: str, epoch: int, iteration: int) -> None:
        """A view opened with `opened` was closed."""
        opened = self.open_positions.get(task)
        if opened is None:  # the task has ended
            return
        position = epoch * self.plans[task].iterations_per_epoch + iteration
        opened[position] -= 1
        if opened[position] <= 0:
            del opened[position]

    def ready_view(self, key: tuple, task: str) -> bytearray | None:
        ready = self.ready.get(key)
        if ready is None:
            return None
        ready.readers_left.discard(task)
        self.ready.move_to_end(key)
        if not ready.readers_left:
            self._forget_on_disk(key)
        return ready.data

    def view_state(self, key: tuple) -> str:
        """SPEC's user.sand.state: ready means in memory or complete on disk."""
        if key in self.state.failures:
            return "failed"
        if key in self.ready:
            return "ready"
        state = self.views.get(key)
        if state is None:
            return "planned"
        if len(state.on_disk) == state.slots:
            return "ready"
        return "materializing" if state.on_disk or state.in_memory else "planned"

    def is_planned(self, key: tuple) -> bool:
        """True when the view is ready or a job is making (or will make) it."""
        return key in self.ready or key in self.views

    async def wait_view(self, key: tuple, task: str) -> bytearray | None:
        """Demand-feed: raise the view's jobs to the top and wait. None: no job will make it."""
        if key in self.state.failures:
            raise ObjectFailed(self.state.failures[key])
        if not self.is_planned(key):
            await self._window_planned(task, key[2])
        if not self.is_planned(key):
            return None
        if key not in self.ready:
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

    async def _window_planned(self, task: str, epoch: int) -> None:
        """Wait while the window of the task's `epoch` is wanted but still being planned (a
        reader that just jumped there): computing its view on demand meanwhile would decode
        it twice."""
        plan = self.plans.get(task)
        window = plan.window_of(epoch) if plan else None
        while plan and window not in self.windows and window in self._wanted_windows():
            self.wake()
            await self._window_added.wait()

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

    def pending_jobs(self) -> list:
        return [key for key, uses in self.pending.items() if uses]

    @property
    def memory_bytes(self) -> int:
        ready = sum(len(r.data) for r in self.ready.values())
        filling = sum(len(v.buffer[0]) for v in self.views.values() if v.buffer is not None)
        frames = sum(job.frame_bytes for job in self.running.values())
        return ready + filling + frames + self.carry_bytes

    # -- windows ----------------------------------------------------------------------------

    def _wanted_windows(self) -> set[int]:
        """Each task's current and next window, and the windows of the views open now."""
        wanted = set()
        for name, plan in self.plans.items():
            per_epoch = plan.iterations_per_epoch
            current = plan.window_of(self.positions[name] // per_epoch)
            wanted |= {w for w in (current, current + 1) if plan.window_epochs(w)}
            wanted |= {plan.window_of(p // per_epoch) for p in self.open_positions[name]}
        return wanted

    async def _activate_windows(self) -> None:
        """Plan the wanted windows; forget those behind them that no reader needs now (a
        window ahead of the tasks, planned for a reader that jumped there, stays)."""
        wanted = self._wanted_windows()
        for window in sorted(wanted - set(self.windows)):
            planned = await trio.to_thread.run_sync(self._plan_window, window)
            self._add_window(window, *planned)
        for window in [w for w in self.windows if w < min(wanted, default=0)]:
            self._drop_window(window)
        await self._plan_future()

    async def _plan_future(self) -> None:
        """Plan the `decode_ahead` windows after each active one, for no other use than
        carrying their frames (`_carry_for`): a job of the next window, started early, carries
        for the window after it."""
        horizon = set()
        if self.store is not None:
            horizon = {w + ahead for w in self.windows for ahead in range(1, self.decode_ahead + 1)
                       if any(p.window_epochs(w + ahead) for p in self.plans.values())}
        horizon -= set(self.windows)
        gone = set(self.future) - horizon  # active now, or behind every task
        if gone:
            self.future = {w: p for w, p in self.future.items() if w in horizon}
            self.frames_on_disk = {k for k in self.frames_on_disk
                                   if k[0] not in gone or k[0] in self.windows}
        for window in sorted(horizon - set(self.future)):
            plans = list(self.plans.values())
            self.future[window] = await trio.to_thread.run_sync(plan_window, plans, window)

    def _forget_future(self) -> None:
        self.frames_on_disk = {k for k in self.frames_on_disk if k[0] not in self.future}
        self.future.clear()

    def _plan_window(self, window: int):
        """In a thread: the window's plan, what is on disk already, and what to keep there."""
        plan = plan_window(list(self.plans.values()), window)
        on_disk, frames_on_disk = set(), set()
        if self.store is not None:
            for path, work in plan.videos.items():
                on_disk |= {(u.view, u.slot) for u in work.uses
                            if clip_object_key(u, work.info) in self.store}
                firsts = first_ops(u.clip for u in work.uses)
                if all(frame_object_key(work.info, k) in self.store
                       or (k in firsts and kept_frame_key(work.info, k, firsts[k]) in self.store)
                       for k in work.frame_keys):
                    frames_on_disk.add(path)
        disk_plans = self._prune(plan)
        if self.on_window_planned is not None:
            self.on_window_planned()
        return plan, on_disk, frames_on_disk, disk_plans

    def _prune(self, plan: WindowPlan) -> dict[str, DiskPlan]:
        if self.store is None:
            return {}
        if os.environ.get("SANDFS_PRUNE") == "leaves":
            return self._leaves_only(plan)
        paths = list(plan.videos)
        graphs = [object_graph_of(plan.videos[p], plan) for p in paths]
        started = time.monotonic()
        chosen = prune(graphs, int(self.store.budget_bytes * PRUNE_TARGET_FRACTION))
        log.info("window %d: keeping %d bytes on disk (%d collapses, %d drops, +%.1fs "
                 "recompute) in %.2fs", plan.window, chosen.total_nbytes, chosen.collapses,
                 chosen.drops, chosen.added_recompute_seconds, time.monotonic() - started)
        plans = {}
        for path, cached in zip(paths, chosen.cached, strict=True):
            plans[path] = DiskPlan(
                clips={(node[1], node[2]) for node in cached if node[0] == "clip"},
                frames=any(node[0] == "frame" for node in cached),
            )
        return plans

    def _leaves_only(self, plan: WindowPlan) -> dict[str, DiskPlan]:
        """The ablation of pruning (SANDFS_PRUNE=leaves, for benchmarks/bench_cache.py): keep
        final clips only, the soonest needed first, as long as they fit."""
        room = int(self.store.budget_bytes * PRUNE_TARGET_FRACTION)
        uses = sorted(((min(pos for _, pos in u.readers), path, u)
                       for path, work in plan.videos.items() for u in work.uses),
                      key=lambda item: (item[0], item[1], item[2].slot))
        plans = {path: DiskPlan() for path in plan.videos}
        for _, path, use in uses:
            nbytes = clip_nbytes(plan.views[use.view][0], use)
            if nbytes > room:
                break
            room -= nbytes
            plans[path].clips.add((use.view, use.slot))
        return plans

    def _add_window(self, window: int, plan: WindowPlan, on_disk: set, frames_on_disk: set,
                    disk_plans: dict[str, DiskPlan]) -> None:
        self.windows[window] = plan
        self._window_added.set()
        self._window_added = trio.Event()
        for key, (task_plan, epoch, iteration) in plan.views.items():
            if key in self.ready or key in self.views:
                continue
            slots = len(task_plan.view_plan(epoch, iteration).clips)
            self.views[key] = ViewState(task_plan, epoch, iteration, slots)
        for path, work in plan.videos.items():
            self.disk_plans[(window, path)] = disk_plans.get(path, DiskPlan())
            if path in frames_on_disk:
                self.disk_plans[(window, path)].frames = True
            pending = []
            for use in work.uses:
                state = self.views.get(use.view)
                if state is None:
                    continue  # ready already
                if (use.view, use.slot) in on_disk:
                    state.on_disk.add(use.slot)
                else:
                    pending.append(use)
            if pending:
                self.pending[(window, path)] = pending
        self.frames_on_disk |= {(window, path) for path in frames_on_disk}
        log.debug("window %d planned: %d videos, %d views, %d clips on disk", window,
                  len(plan.videos), len(plan.views), len(on_disk))

    # -- tasks joining and leaving -----------------------------------------------------------

    async def add_plan(self, plan: TaskPlan) -> None:
        """Plan a new task into the active windows (and the windows to come)."""
        self.plans[plan.name] = plan
        self.positions[plan.name] = 0
        self.open_positions[plan.name] = Counter()
        self._forget_future()  # planned again with the new task
        for window in sorted(self.windows):
            part, on_disk = await trio.to_thread.run_sync(self._plan_part, plan, window)
            self._merge_window(window, part, on_disk)
        self.wake()

    def _plan_part(self, plan: TaskPlan, window: int):
        part = plan_window([plan], window)
        on_disk = set()
        if self.store is not None:
            on_disk = {(u.view, u.slot) for work in part.videos.values() for u in work.uses
                       if clip_object_key(u, work.info) in self.store}
        return part, on_disk

    def _merge_window(self, window: int, part: WindowPlan, on_disk: set) -> None:
        base = self.windows[window]
        new_views = set()
        for key, readers in part.readers.items():
            if key in base.views:  # an identical pipeline is planned already: one more reader
                base.readers[key] = base.readers[key] + readers
                if key in self.ready:
                    self.ready[key].readers_left |= {task for task, _ in readers}
                continue
            new_views.add(key)
            base.views[key] = part.views[key]
            base.readers[key] = readers
            plan, epoch, iteration = part.views[key]
            slots = len(plan.view_plan(epoch, iteration).clips)
            self.views[key] = ViewState(plan, epoch, iteration, slots)
        for path, work in part.videos.items():
            uses = [u for u in work.uses if u.view in new_views]
            if not uses:
                continue
            base.videos.setdefault(path, VideoWork(work.info, work.plan, window)).uses += uses
            self.disk_plans.setdefault((window, path), DiskPlan())
            for use in uses:
                if (use.view, use.slot) in on_disk:
                    self.views[use.view].on_disk.add(use.slot)
                else:
                    self.pending.setdefault((window, path), []).append(use)

    async def remove_plan(self, name: str) -> None:
        """Forget a task: views no other task reads are released, in memory and on disk."""
        self.plans.pop(name, None)
        self.positions.pop(name, None)
        self.open_positions.pop(name, None)
        self._forget_future()
        released: dict[tuple, tuple[TaskPlan, int, int]] = {}
        for window in self.windows.values():
            for key in list(window.readers):
                readers = tuple(r for r in window.readers[key] if r[0] != name)
                if readers:
                    window.readers[key] = readers
                    continue
                del window.readers[key]
                released[key] = window.views.pop(key)
            for work in window.videos.values():
                work.uses = [u for u in work.uses if u.view not in released]
        for job_key, uses in self.pending.items():
            self.pending[job_key] = [u for u in uses if u.view not in released]
        for key in released:
            self.views.pop(key, None)
            self.ready.pop(key, None)
            self.demanded.discard(key)
            event = self.events.pop(key, None)
            if event is not None:
                event.set()
        for ready in self.ready.values():
            ready.readers_left.discard(name)
        if self.store is not None:
            await trio.to_thread.run_sync(self._release_clips, released)
        self.wake()

    def _release_clips(self, released: dict[tuple, tuple[TaskPlan, int, int]]) -> None:
        """In a thread: delete the clips of released views from disk."""
        for key, (plan, epoch, iteration) in released.items():
            for slot, clip in enumerate(plan.view_plan(epoch, iteration).clips):
                use = ClipUse(key, slot, clip, ())
                self.store.discard(clip_object_key(use, plan.videos[clip.video_index]))

    def _drop_window(self, window: int) -> None:
        plan = self.windows.pop(window)
        for key in [k for k in self.pending if k[0] == window]:
            del self.pending[key]
        for key in [k for k in self.disk_plans if k[0] == window]:
            del self.disk_plans[key]
        self.frames_on_disk = {k for k in self.frames_on_disk if k[0] != window}
        for key in plan.views:
            self.views.pop(key, None)
            self.demanded.discard(key)
            event = self.events.pop(key, None)
            if event is not None:  # a reader still waits: it computes the view on demand
                event.set()

    # -- choosing and starting jobs ---------------------------------------------------------

    def _deadline_of(self, key: tuple) -> int:
        """Iterations until a reader gets to this view: from the task's position, or from a
        view open behind it (a second reader of the task)."""
        ahead = [pos - at
                 for window in self.windows.values()
                 for task, pos in window.readers.get(key, ())
                 for at in (self.positions[task], *self.open_positions[task])
                 if pos >= at]
        return min(ahead, default=NOT_NEEDED)

    def _job_states(self):
        """(JobState, job key, kind) of every job that could run now."""
        for job_key, uses in self.pending.items():
            if job_key in self.running or job_key in self.carried or not uses:
                continue  # a job decoding for it now leaves its frames on disk: wait for them
            yield JobState(
                key=f"v{job_key[0]}:{job_key[1]}",
                demanded=any(u.view in self.demanded for u in uses),
                deadline_iterations=min(self._deadline_of(u.view) for u in uses),
                remaining_work=len({i for u in uses for i in u.clip.frame_indices}) + len(uses),
            ), job_key, "video"
        for key, state in self.views.items():
            if key in self.running or not state.on_disk - state.in_memory:
                continue
            if state.on_disk | state.in_memory != set(range(state.slots)):
                continue  # some slots still need a video job; it will bring them in
            yield JobState(f"a{key}", key in self.demanded, self._deadline_of(key),
                           len(state.on_disk - state.in_memory)), key, "assemble"

    def active_workers(self, states: Sequence[JobState] | None = None) -> int:
        """How many jobs may run now (`workers_to_run`: queue occupancy and deadlines);
        `states`: the jobs that could run, when the caller has them already."""
        if self.demanded or not self.plans:
            return self.workers
        every_task_ahead = all(
            self.ready_ahead(task, AHEAD_TARGET) >= min(AHEAD_TARGET, self._left(task))
            for task in self.plans)
        if states is None:
            states = [state for state, _, _ in self._job_states()]
        soonest = min((state.deadline_iterations for state in states), default=NOT_NEEDED)
        return workers_to_run(self.workers, demanded=False, every_task_ahead=every_task_ahead,
                              soonest_deadline=soonest)

    def _left(self, task: str) -> int:
        plan = self.plans[task]
        return plan.epochs * plan.iterations_per_epoch - self.positions[task] - 1

    def _dispatch(self) -> None:
        while True:
            options = {s.key: (s, k, kind) for s, k, kind in self._job_states()}
            if len(self.running) >= self.active_workers([s for s, _, _ in options.values()]):
                return
            pressure = under_pressure(self.memory_bytes, self.memory_limit_bytes)
            best = pick_next((s for s, _, _ in options.values()), memory_pressure=pressure,
                             policy=self.policy)
            if best is None or (best.deadline_iterations >= NOT_NEEDED and not best.demanded):
                return
            _, job_key, kind = options[best.key]
            job = (self._admit_video(job_key, demanded=best.demanded) if kind == "video"
                   else self._admit_assembly(job_key, demanded=best.demanded))
            if job is None:
                return
            self._start(job)

    def _reserve_buffer(self, key: tuple, free: int, *, demanded: bool) -> tuple[bool, int]:
        """Room for the batch `key` in memory (evicting ready ones if need be)."""
        state = self.views[key]
        if state.buffer is not None:
            return True, free
        cost = state.plan.view_nbytes(state.epoch, state.iteration)
        if cost > free:
            free += self._evict(cost - free, keep=key, deadline=self._deadline_of(key))
        if cost > free and not demanded:
            return False, free
        return True, free - cost

    def _admit_video(self, job_key, *, demanded: bool) -> Job | None:
        """The pending clips of this video that can go somewhere now: into a batch that fits in
        memory, or to disk when pruning keeps them there. Most urgent first."""
        window, path = job_key
        work = self.windows[window].videos[path]
        disk = self.disk_plans.get(job_key, DiskPlan())
        frames_on_disk = job_key in self.frames_on_disk
        carry = {} if frames_on_disk else self._carry_for(window, path)
        frame_bytes = sum(frame_nbytes(work.info, k)
                          for k in work.frame_keys.union(*(c.keys for c in carry.values())))
        free = self.memory_limit_bytes - self.memory_bytes - frame_bytes
        job = Job("video", window, job_key, work, frame_bytes=frame_bytes,
                  save_frames=disk.frames and self.store is not None,
                  frames_on_disk=frames_on_disk, carry=carry)
        reserved: set[tuple] = set()
        for use in sorted(self.pending[job_key], key=lambda u: self._deadline_of(u.view)):
            fits = use.view in reserved
            if not fits:
                fits, free = self._reserve_buffer(use.view, free,
                                                  demanded=demanded and use.view in self.demanded)
                if fits:
                    reserved.add(use.view)
            keep = (use.view, use.slot) in disk.clips and self.store is not None
            if fits:
                job.to_memory.add((use.view, use.slot))
            if keep:
                job.to_disk.add((use.view, use.slot))
            if fits or keep:
                job.uses.append(use)
        return job if job.uses else None

    def _carry_for(self, window: int, path: str) -> dict[int, Carry]:
        """The frames later windows (up to `decode_ahead` ahead) need from this video and no
        job made yet. With one keyframe per video a pass decodes from the start anyway:
        decoding them now and keeping them on disk saves each of those windows a pass. As many
        windows as fit in half the storage budget and a quarter of the memory limit."""
        if self.store is None:
            return {}
        disk_room = self.store.room_below(CARRY_STORE_FRACTION)
        memory_room = self.memory_limit_bytes // 4
        carry, nbytes = {}, 0
        later = sorted(((w, p) for w, p in (*self.windows.items(), *self.future.items())
                        if window < w <= window + self.decode_ahead), key=lambda item: item[0])
        for index, plan in later:
            work, key = plan.videos.get(path), (index, path)
            if (work is None or key in self.frames_on_disk or key in self.running
                    or key in self.carried
                    or (index in self.windows and not self.pending.get(key))):
                continue
            keys = work.frame_keys
            size = sum(frame_nbytes(work.info, k) for k in keys)
            if nbytes + size > min(disk_room, memory_room):
                break
            nbytes += size
            carry[index] = Carry(keys, min(pos for u in work.uses for _, pos in u.readers),
                                 first_ops(u.clip for u in work.uses))
        return carry

    def _admit_assembly(self, key: tuple, *, demanded: bool) -> Job | None:
        fits, _ = self._reserve_buffer(key, self.memory_limit_bytes - self.memory_bytes,
                                       demanded=demanded)
        return Job("assemble", -1, key) if fits else None

    def _buffer(self, key: tuple) -> np.ndarray:
        state = self.views[key]
        if state.buffer is None:
            view = state.plan.view_plan(state.epoch, state.iteration)
            state.buffer = npy_buffer(view.shape, view.dtype)
        return state.buffer[1]

    def _start(self, job: Job) -> None:
        """Claim the job's clips and buffers, and freeze what its thread needs to know."""
        if job.kind == "video":
            taken = {(u.view, u.slot) for u in job.uses}
            self.pending[job.key] = [u for u in self.pending[job.key]
                                     if (u.view, u.slot) not in taken]
            targets = {view: self._buffer(view) for view, _ in job.to_memory}
            for use in job.uses:
                job.deadlines[use.view] = min((pos for _, pos in use.readers), default=0)
                job.layouts[use.view] = self.views[use.view].plan.sampling.layout
                job.states[use.view] = self.views[use.view]
        else:
            targets = {job.key: self._buffer(job.key)}
            state = job.states[job.key] = self.views[job.key]
            job.assembly = (state.plan, state.plan.view_plan(state.epoch, state.iteration),
                            sorted(state.on_disk - state.in_memory))
        self.running[job.key] = job
        self.carried |= {(later, job.key[1]) for later in job.carry}
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job, targets, name=f"{job.kind} job {job.key}")

    async def _run(self, job: Job, targets: dict[tuple, np.ndarray]) -> None:
        work = self._materialize_video if job.kind == "video" else self._assemble
        carried: dict[int, dict[FrameKey, np.ndarray]] = {}
        try:
            placed, saved, carried = await trio.to_thread.run_sync(work, job, targets,
                                                                   limiter=self.limiter)
        except Exception as exc:  # a broken video: its views fail (EIO), nothing else does
            reason = f"{type(exc).__name__}: {exc}"
            what = job.work.info.rel_path if job.work else job.key
            log.error("%s job for %s failed: %s", job.kind, what, reason)
            views = {u.view for u in job.uses} if job.kind == "video" else {job.key}
            for view in views:
                self._fail(view, reason)
        else:
            self._record(job, placed)
            self._note_on_disk(saved)
        finally:
            del self.running[job.key]
            self.state.jobs_done += 1
            if carried:  # written beside the workers: the next job need not wait for it
                nbytes = sum(f.nbytes for fs in carried.values() for f in fs.values())
                self.carry_bytes += nbytes
                self._nursery.start_soon(self._keep_carried, job, carried, nbytes)
            else:
                self.carried -= {(later, job.key[1]) for later in job.carry}
            self.wake()

    async def _keep_carried(self, job: Job, carried: dict[int, dict[FrameKey, np.ndarray]],
                            nbytes: int) -> None:
        try:
            saved = await trio.to_thread.run_sync(self._save_carried, job, carried,
                                                  limiter=self.carry_limiter)
            self._note_on_disk(saved)
        finally:
            self.carry_bytes -= nbytes
            self.carried -= {(later, job.key[1]) for later in job.carry}
            self.wake()

    def _note_on_disk(self, saved: list[tuple[int, str]]) -> None:
        """(window, video)s whose frames are all on disk now; a window dropped meanwhile
        checks the store again when it is planned."""
        self.frames_on_disk |= {(w, path) for w, path in saved
                                if w in self.windows or w in self.future}

    # -- in worker threads ------------------------------------------------------------------

    @staticmethod
    def _yield_to_readers() -> None:
        """Run this worker thread at a lower CPU priority than the thread serving FUSE and
        than the trainers: a ready batch is handed over at once even while jobs run. Linux
        keeps a nice value per thread; where it cannot be set, nothing changes."""
        if getattr(_thread_state, "niced", False):
            return
        _thread_state.niced = True
        thread = threading.get_native_id()
        with contextlib.suppress(OSError):
            nice = os.getpriority(os.PRIO_PROCESS, thread)
            os.setpriority(os.PRIO_PROCESS, thread, min(19, nice + BACKGROUND_NICE))

    def _materialize_video(self, job: Job, targets: dict[tuple, np.ndarray]):
        """One decode pass (or frames from disk), every clip once, into memory and to disk.
        Returns the clips placed, the (window, video)s whose frames it saved, and the frames
        it decoded for later windows (saved once the batches are handed over)."""
        assert job.work is not None
        self._yield_to_readers()
        info = job.work.info
        frames = self._frames_from_disk(job) if job.frames_on_disk else None
        saved, carried = [], {}
        if frames is None:
            frames = self.materializer.decode(info, job.decode_keys)
            own = {k: frames[k] for k in job.frames}
            if job.save_frames and self._save_frames(info, own):
                saved.append(job.key)
            carried = {later: {k: frames[k] for k in keys}
                       for later, (keys, _, _) in job.carry.items()}
        clips = self.materializer.augment_clips(
            [u.clip for u in job.uses], frames, [len(u.readers) for u in job.uses])
        placed = []
        for use, clip in zip(job.uses, clips, strict=True):
            array = to_layout(clip, job.layouts[use.view])
            spot = (use.view, use.slot)
            if spot in job.to_memory:
                targets[use.view][use.slot] = array
            stored = spot in job.to_disk and self.store.put(
                clip_object_key(use, info), array, deadline=job.deadlines[use.view])
            placed.append((use, spot in job.to_memory, bool(stored)))
        return placed, saved, carried

    def _save_carried(self, job: Job, carried: dict[int, dict[FrameKey, np.ndarray]]) -> list:
        """Keep frames decoded for later windows on disk; a failure only means that those
        windows decode for themselves (the batches of this job are out already)."""
        self._yield_to_readers()
        saved = []
        info = job.work.info
        for later, frames in carried.items():
            _, deadline, firsts = job.carry[later]
            try:
                ok = all([self.store.put(kept_frame_key(info, k, firsts.get(k)),
                                         kept_frame(frame, firsts.get(k)), deadline=deadline)
                          for k, frame in frames.items()])
            except Exception as exc:
                log.warning("keeping frames of %s for window %d failed: %s: %s",
                            info.rel_path, later, type(exc).__name__, exc)
                ok = False
            if ok:
                saved.append((later, info.path))
                self.stats.add("frames_carried", len(frames))
        return saved

    def _frames_from_disk(self, job: Job) -> dict[FrameKey, object] | None:
        """The job's frames from disk: as kept for this window (after the first op of all
        its clips that use them: `Prefixed`), or as decoded; None when one is missing."""
        info, frames = job.work.info, {}
        firsts = first_ops(u.clip for u in job.uses)
        for key in job.frames:
            op = firsts.get(key)
            array = None if op is None else self.store.get(kept_frame_key(info, key, op))
            if array is not None:
                frames[key] = Prefixed(op, array)
                continue
            array = self.store.get(frame_object_key(info, key))
            if array is None:
                self.store.note_recomputed()
                return None
            frames[key] = array
        self.stats.add("frames_from_disk", len(frames))
        return frames

    def _save_frames(self, info: VideoInfo, frames: dict[FrameKey, np.ndarray]) -> bool:
        """True when every frame is on disk afterwards."""
        return all([self.store.put(frame_object_key(info, k), f) for k, f in frames.items()])

    def _assemble(self, job: Job, targets: dict[tuple, np.ndarray]):
        """Read a batch's clips back from disk; a missing or corrupt one is recomputed."""
        assert job.assembly is not None and self.store is not None
        plan, view, slots = job.assembly
        array = targets[job.key]
        placed = []
        for slot in slots:
            clip = view.clips[slot]
            use = ClipUse(job.key, slot, clip, ())
            stored = self.store.get(clip_object_key(use, plan.videos[clip.video_index]))
            if stored is None:
                self.store.note_recomputed()
                stored = self._recompute_clip(plan, clip)
            array[slot] = stored
            placed.append((use, True, True))
        return placed, [], {}

    def _recompute_clip(self, plan: TaskPlan, clip) -> np.ndarray:
        info = plan.videos[clip.video_index]
        frames = self.materializer.decode(info, clip_frame_keys(clip))
        out = next(iter(self.materializer.augment_clips([clip], frames)))
        self.stats.add("clips_recomputed")
        return to_layout(out, plan.sampling.layout)

    # -- back in the trio loop --------------------------------------------------------------

    def _record(self, job: Job, placed) -> None:
        for use, in_memory, on_disk in placed:
            spot = (use.view, use.slot)
            if job.kind == "video":
                if spot in self.made:
                    self.stats.add("clips_recomputed")
                self.made.add(spot)
            state = self.views.get(use.view)
            if state is None or state is not job.states.get(use.view):
                continue
            if on_disk:
                state.on_disk.add(use.slot)
            if in_memory:
                state.in_memory.add(use.slot)
            if job.kind == "video" and not in_memory and not on_disk:
                self.pending.setdefault(job.key, []).append(use)  # could not be kept: later
        if job.kind == "assemble":
            self.state.rebuilt_from_disk += 1
        for view in {use.view for use, _, _ in placed}:
            if self.views.get(view) is job.states.get(view):
                self._complete_if_full(view)

    def _complete_if_full(self, key: tuple) -> None:
        state = self.views.get(key)
        if state is None or state.buffer is None or len(state.in_memory) < state.slots:
            return
        del self.views[key]
        readers = self._readers(key)
        self.ready[key] = ReadyView(state.buffer[0], readers)
        self.stats.add("views_materialized")
        self._count_independent(state, len(readers) or 1)
        self.demanded.discard(key)
        event = self.events.pop(key, None)
        if event is not None:
            event.set()

    def _fail(self, key: tuple, reason: str) -> None:
        self.state.failures[key] = reason
        self.views.pop(key, None)
        for job_key, uses in self.pending.items():
            self.pending[job_key] = [u for u in uses if u.view != key]
        event = self.events.pop(key, None)
        if event is not None:
            event.set()

    def _readers(self, key: tuple) -> set[str]:
        for window in self.windows.values():
            if key in window.readers:
                return {task for task, _ in window.readers[key]}
        return set()

    def _count_independent(self, state: ViewState, readers: int) -> None:
        view = state.plan.view_plan(state.epoch, state.iteration)
        for _ in range(readers):
            self.materializer.count_independent(state.plan, view)

    def _forget_on_disk(self, key: tuple) -> None:
        """Every reader has the batch: its clips on disk are the first to evict."""
        if self.store is None:
            return
        for window in self.windows.values():
            if key not in window.views:
                continue
            plan, epoch, iteration = window.views[key]
            for slot, clip in enumerate(plan.view_plan(epoch, iteration).clips):
                use = ClipUse(key, slot, clip, ())
                self.store.mark_done(clip_object_key(use, plan.videos[clip.video_index]))

    def _evict(self, needed_bytes: int, *, keep: tuple, deadline: int) -> int:
        """Drop ready batches from memory to make room for one needed at `deadline`: fully
        read ones (oldest first), then unread ones needed later than it, the latest first
        (they are rebuilt from disk or recomputed) — never one needed sooner, which would only
        trade places with it. Returns the bytes freed."""
        freed = 0
        for key in [k for k, r in self.ready.items() if not r.readers_left and k != keep]:
            if freed >= needed_bytes:
                return freed
            freed += len(self.ready.pop(key).data)
        later = [(d, k) for k in self.ready if k != keep
                 and (d := self._deadline_of(k)) > deadline]
        for _, key in sorted(later, key=lambda item: item[0], reverse=True):
            if freed >= needed_bytes:
                break
            freed += len(self.ready.pop(key).data)
            self.state.evicted_unread += 1
            self._replan_evicted(key)
        return freed

    def _replan_evicted(self, key: tuple) -> None:
        """An unread batch left memory: plan it again (its clips may still be on disk)."""
        for window_index, window in self.windows.items():
            if key not in window.views:
                continue
            plan, epoch, iteration = window.views[key]
            view = plan.view_plan(epoch, iteration)
            state = ViewState(plan, epoch, iteration, len(view.clips))
            for slot, clip in enumerate(view.clips):
                use = ClipUse(key, slot, clip, window.readers[key])
                info = plan.videos[clip.video_index]
                if self.store is not None and clip_object_key(use, info) in self.store:
                    state.on_disk.add(slot)
                else:
                    self.pending.setdefault((window_index, info.path), []).append(use)
            self.views[key] = state
            return


def object_graph_of(work: VideoWork, window: WindowPlan) -> nx.DiGraph:
    """One video's objects in a window for pruning: video -> frames -> clips, with sizes and
    the cost (seconds) of the op that makes each from its parents."""
    info = work.info
    mpixels = info.width * info.height / 1e6
    frames = sorted(work.frames)
    decode_per_frame = (DECODE_SECONDS_PER_MPIXEL * mpixels
                        * frames_to_decode(info, frames) / max(1, len(frames)))
    graph = nx.DiGraph()
    graph.add_node(("video",), nbytes=0)
    for key in sorted(work.frame_keys, key=repr):
        height, width = key[1][0] if key[1] else (info.height, info.width)
        graph.add_node(("frame", key), nbytes=width * height * 3)
        graph.add_edge(("video",), ("frame", key), cost_seconds=decode_per_frame)
    for use in work.uses:
        node = ("clip", use.view, use.slot)
        graph.add_node(node, nbytes=clip_nbytes(window.views[use.view][0], use))
        share = AUGMENT_SECONDS_PER_MPIXEL * mpixels
        for key in clip_frame_keys(use.clip):
            graph.add_edge(("frame", key), node, cost_seconds=share)
    return graph


def clip_nbytes(plan: TaskPlan, use: ClipUse) -> int:
    h, w = plan.out_hw
    itemsize = np.dtype(plan.out_dtype).itemsize
    return len(use.clip.frame_indices) * h * w * 3 * itemsize

