"""The view service: what the FUSE layer asks for, in plan terms (task, epoch, iteration, video,
frame, depth). It owns the task plans, the object engine and the figures of status.json.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from sandfs.cache import ObjectStore
from sandfs.config.loader import load_task_config
from sandfs.config.schema import TaskConfig
from sandfs.engine import ObjectEngine
from sandfs.errors import UserError
from sandfs.materialize import Materializer
from sandfs.media.types import BadVideo, VideoInfo
from sandfs.npy import npy_nbytes
from sandfs.ops import chain_shape, isolated
from sandfs.ops.base import FrameShape, OpInstance
from sandfs.plan.task import StreamClip, TaskPlan
from sandfs.plan.window import view_key
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats


@dataclass(frozen=True, slots=True)
class FramePlan:
    """What aug{D} of one frame is: the planned ops up to depth D, and the result's shape."""

    ops: tuple[OpInstance, ...]
    shape: tuple[int, int, int]
    dtype: str
    source: tuple | None = None  # the frame the ops start from (decode_resize), None: full

    @property
    def nbytes(self) -> int:
        return npy_nbytes(self.shape, self.dtype)


log = logging.getLogger(__name__)


class ViewService:
    def __init__(
        self,
        plans: Sequence[TaskPlan],
        *,
        engine: ObjectEngine,
        stats: Stats,
        bad_videos: Sequence[BadVideo] = (),
        task_texts: dict[str, str] | None = None,
        memory_limit_bytes: int = 1 << 30,
        read_ahead: int = 8,
        store: ObjectStore | None = None,
        decode_ahead: int = 0,
        checkpoint: Callable[[dict], None] | None = None,
        task_planner: Callable[[TaskConfig, int], TaskPlan] | None = None,
        config_dir: str = "/",
    ) -> None:
        self.tasks = {p.name: p for p in plans}
        self.engine = engine
        self.stats = stats
        self.materializer = Materializer(stats)
        self.scheduler = Scheduler(plans, self.materializer, stats, workers=engine.workers,
                                   memory_limit_bytes=memory_limit_bytes, limiter=engine.limiter,
                                   store=store, decode_ahead=decode_ahead,
                                   on_window_planned=self.window_planned)
        self.store = store
        self.checkpoint = checkpoint
        self.task_planner = task_planner  # plans a task registered on the live mount
        self.config_dir = config_dir  # where relative paths of such a task point from
        self.task_errors: dict[str, str] = {}  # why a registration was refused, by task name
        self.generations = dict.fromkeys(self.tasks, 0)  # registrations of each task name
        self.bad_videos = list(bad_videos)
        self.task_texts = task_texts or {}
        self.read_ahead = read_ahead  # how far status.json's ready_ahead looks
        self.positions: dict[str, tuple[int, int]] = {name: (0, 0) for name in self.tasks}
        self.started = time.monotonic()
        self._frame_uses: dict[tuple[str, int], dict[tuple[int, int], StreamClip]] = {}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the scheduler until cancelled; it starts preparing views at once."""
        await self.scheduler.run(task_status=task_status)

    def window_planned(self) -> None:
        """In a worker thread, after the scheduler planned a window: checkpoint what it froze."""
        coordination = next(iter(self.tasks.values())).coordination if self.tasks else None
        if self.checkpoint is not None and coordination is not None and coordination.changed:
            self.checkpoint(coordination.state())

    # -- tasks joining and leaving -----------------------------------------------------------

    async def add_task_file(self, file_name: str, text: str) -> None:
        """A YAML written to .sand/tasks/NAME.yaml. Relative paths in it are resolved against
        the folder named by a first line `# sandfs-base-dir: DIR` (`sandfs task add` writes
        it), else against the folder of the mount's first config."""
        cfg = load_task_config(os.path.join(self.config_dir, file_name), text=text)
        if f"{cfg.task}.yaml" != file_name:
            raise UserError(f"{file_name}: the file must be named after its task: "
                            f"{cfg.task}.yaml")
        await self.add_task(cfg, text)

    async def add_task(self, cfg: TaskConfig, text: str) -> None:
        """Register a task on the live mount. Windows already planned keep what they share;
        the task's views are planned into them as they are (SPEC §6), its epoch 0 into the
        window the leading task on its dataset is in."""
        if cfg.task in self.tasks:
            raise UserError(f"task {cfg.task} is already registered on this mount")
        if self.task_planner is None:
            raise UserError("this mount does not take new tasks")
        plan = await trio.to_thread.run_sync(self.task_planner, cfg, self.mount_epoch(cfg))
        self.tasks[cfg.task] = plan
        self.generations[cfg.task] = self.generations.get(cfg.task, -1) + 1
        self.task_texts[cfg.task] = text
        self.positions[cfg.task] = (0, 0)
        self.task_errors.pop(cfg.task, None)
        await self.scheduler.add_plan(plan)
        log.info("task %s registered: %d videos, %d iterations/epoch", cfg.task,
                 len(plan.videos), plan.iterations_per_epoch)

    def mount_epoch(self, cfg: TaskConfig) -> int:
        """Where the leading task on `cfg`'s dataset stands, in mount epochs (0: none): a
        joining task starts its windows there, sharing the frames being decoded now."""
        root = cfg.dataset.video_dataset_path
        return max((plan.epoch_offset + self.positions[name][0]
                    for name, plan in self.tasks.items()
                    if plan.cfg.dataset.video_dataset_path == root), default=0)

    async def remove_task(self, name: str) -> None:
        """End a task: its views are no longer served and the objects only it needed are
        released (memory and disk)."""
        plan = self.tasks.pop(name)
        self.task_texts.pop(name, None)
        self.positions.pop(name, None)
        plan.coordination.remove(name)
        await self.scheduler.remove_plan(name)
        log.info("task %s ended", name)

    # -- batch views -------------------------------------------------------------------------

    def view_state(self, task: str, epoch: int, iteration: int) -> str:
        key = view_key(self.tasks[task], epoch, iteration)
        state = self.scheduler.view_state(key)
        return self.engine.state(key) if state == "planned" else state

    def opened_view(self, task: str, epoch: int, iteration: int) -> None:
        """A trainer opened this view: that is where the task stands (deadlines count from it)."""
        self.positions[task] = (epoch, iteration)
        self.scheduler.opened(task, epoch, iteration)

    def released_view(self, task: str, epoch: int, iteration: int) -> None:
        """A trainer closed a view it had opened."""
        self.scheduler.released(task, epoch, iteration)

    async def read_view(self, task: str, epoch: int, iteration: int) -> bytes:
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
        return data

    def _view_compute(self, plan: TaskPlan, epoch: int, iteration: int):
        return lambda: self.materializer.view_bytes(plan, plan.view_plan(epoch, iteration))

    def view_meta(self, task: str, epoch: int, iteration: int) -> dict:
        plan = self.tasks[task]
        return plan.view_meta(plan.view_plan(epoch, iteration))

    # -- frames and intermediate views -------------------------------------------------------

    def frame_uses(self, task: str, epoch: int) -> dict[tuple[int, int], StreamClip]:
        """(video, frame) -> the first clip of this epoch that uses that frame."""
        key = (task, epoch)
        if key not in self._frame_uses:
            plan = self.tasks[task]
            uses: dict[tuple[int, int], StreamClip] = {}
            for iteration in range(plan.iterations_per_epoch):
                for clip in plan.view_plan(epoch, iteration).clips:
                    for index in clip.frame_indices:
                        uses.setdefault((clip.video_index, index), clip)
            self._frame_uses = {key: uses}  # keep one epoch: it is what aug{D} shows
        return self._frame_uses[key]

    def frame_plan(self, task: str, video_index: int, frame: int, depth: int) -> FramePlan | None:
        """aug{depth} of this frame in the task's current epoch, or None if not planned."""
        plan = self.tasks[task]
        info = plan.videos[video_index]
        if not 0 <= frame < info.num_frames:
            return None
        if depth == 0:
            return FramePlan((), (info.height, info.width, 3), "uint8")
        clip = self.frame_uses(task, self.positions[task][0]).get((video_index, frame))
        if clip is None or depth > len(clip.step_depths):
            return None
        ops = clip.ops[: clip.step_depths[depth - 1]]
        start = FrameShape(*plan.source_hw(info), "uint8")
        shape, _ = chain_shape([(o.name, o.params) for o in ops], start, 1)
        return FramePlan(ops, (shape.height, shape.width, 3), shape.dtype, clip.source)

    def max_depth(self, task: str, video_index: int, frame: int) -> int:
        clip = self.frame_uses(task, self.positions[task][0]).get((video_index, frame))
        return 0 if clip is None else len(clip.step_depths)

    async def read_frame(self, task: str, video_index: int, frame: int, fplan: FramePlan):
        info: VideoInfo = self.tasks[task].videos[video_index]
        key = ("frame", info.path, frame, fplan.source, fplan.ops)
        return await self.engine.get(
            key, lambda: self.materializer.frame_bytes(info, frame, fplan.ops, fplan.source)
        )

    # -- status ------------------------------------------------------------------------------

    def status(self) -> dict:
        stats = self.stats
        sched = self.scheduler.state
        tasks = {}
        for name, plan in self.tasks.items():
            epoch, iteration = self.positions[name]
            ahead = self.scheduler.ready_ahead(name, self.read_ahead)
            counts = stats.task_counts(name)
            tasks[name] = {
                "epoch": epoch,
                "iteration": iteration,
                "ready_ahead": ahead,
                "views_served": counts.get("views_served", 0),
                "stall_seconds": round(stats.stall_seconds(name), 3),
                "epochs": plan.epochs,
                "iterations_per_epoch": plan.iterations_per_epoch,
                "videos": len(plan.videos),
            }
        bad = [{"path": b.rel_path, "reason": b.reason, "detail": b.detail}
               for b in self.bad_videos]
        for plan in self.tasks.values():
            bad += [{"path": b.rel_path, "reason": b.reason, "detail": b.detail, "task": plan.name}
                    for b in plan.skipped]
        return {
            "version": 1,
            "uptime_seconds": round(time.monotonic() - self.started, 3),
            "pid": os.getpid(),
            "workers": self.engine.workers,
            "memory_bytes": self.engine.memory_bytes + self.scheduler.memory_bytes,
            "memory_limit_bytes": self.scheduler.memory_limit_bytes,
            "tasks": tasks,
            "frames_decoded": stats.get("frames_decoded"),
            "frames_decoded_independent": stats.get("frames_decoded_independent"),
            "views_materialized": stats.get("views_materialized"),
            "cache": self.cache_status(),
            "views_recomputed": stats.get("views_recomputed"),
            "aug_ops": stats.get("aug_ops"),
            "aug_ops_independent": stats.get("aug_ops_independent"),
            "crop_ops": stats.get("crop_ops"),
            "crop_ops_independent": stats.get("crop_ops_independent"),
            "scheduler": {"jobs_done": sched.jobs_done, "jobs_running": len(self.scheduler.running),
                          "workers_active": self.scheduler.active_workers(),
                          "views_ready": len(self.scheduler.ready),
                          "views_planned": len(self.scheduler.views),
                          "evicted_unread": sched.evicted_unread,
                          "rebuilt_from_disk": sched.rebuilt_from_disk,
                          "clips_recomputed": stats.get("clips_recomputed")},
            "frames_from_disk": stats.get("frames_from_disk"),
            "frames_carried": stats.get("frames_carried"),
            "queues": {"demand": self.engine.demand_waiting + sched.demand_waiting,
                       "prematerialize": len(self.scheduler.pending_jobs())},
            "bad_videos": bad,
            "task_errors": dict(self.task_errors),
            "isolated_ops": isolated.status(),  # custom steps run out of process
        }

    def cache_status(self) -> dict:
        if self.store is None:
            return {"bytes_used": 0, "budget_bytes": 0, "objects": 0, "hits": 0, "misses": 0,
                    "evictions": 0, "recomputed": 0, "corrupt_detected": 0}
        return self.store.stats()

    def status_bytes(self) -> bytes:
        return (json.dumps(self.status(), indent=1, sort_keys=False) + "\n").encode()
