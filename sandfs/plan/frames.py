"""aug{D} of single frames: what depth D of one frame's augmentation is in a task's epoch (the
ops of the first clip of that epoch that uses the frame, up to its D-th step) and its shape.

Only the view that holds the frame's video in that epoch is planned, never the whole epoch: a
listing of `frame{N}` costs what it shows (sched/frameplanner.py runs it off the event loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sandfs.config.condition import ConditionError
from sandfs.npy import npy_nbytes
from sandfs.ops import chain_shape
from sandfs.ops.base import FrameShape, OpInstance
from sandfs.plan.task import StreamClip, TaskPlan


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


@dataclass(frozen=True, slots=True)
class FailedView:
    """A view whose branch condition failed while planning: its frames have no aug{D}."""

    epoch: int
    iteration: int
    reason: str


@dataclass(frozen=True, slots=True)
class VideoUses:
    """The clips of one video in one epoch of a task, in the order the epoch uses them
    (iterations, then each view's clip order), and the views holding it that failed."""

    clips: tuple[StreamClip, ...]
    failed: tuple[FailedView, ...] = ()

    def first_use(self, frame: int) -> StreamClip | None:
        return next((clip for clip in self.clips if frame in clip.frame_indices), None)

    def max_depth(self, frame: int) -> int:
        """The deepest aug{D} of the frame (0: only the decoded frame)."""
        clip = self.first_use(frame)
        return 0 if clip is None else len(clip.step_depths)


def iterations_of(plan: TaskPlan, epoch: int, video_index: int) -> list[int]:
    """The iterations of `epoch` whose batch holds the video, ascending."""
    positions = np.flatnonzero(plan.epoch_order(epoch) == video_index)
    iterations = {int(p) // plan.sampling.videos_per_batch for p in positions}
    return sorted(i for i in iterations if i < plan.iterations_per_epoch)


def video_uses(plan: TaskPlan, epoch: int, video_index: int) -> VideoUses:
    """Plan the views of `epoch` that hold the video (pure; safe in a worker thread)."""
    clips: list[StreamClip] = []
    failed: list[FailedView] = []
    for iteration in iterations_of(plan, epoch, video_index):
        try:
            view = plan.view_plan(epoch, iteration)
        except ConditionError as exc:  # its frames have no aug{D}; the others do
            failed.append(FailedView(epoch, iteration, str(exc)))
            continue
        clips += [clip for clip in view.clips if clip.video_index == video_index]
    return VideoUses(tuple(clips), tuple(failed))


def frame_plan(plan: TaskPlan, video_index: int, frame: int, depth: int,
               uses: Callable[[], VideoUses]) -> FramePlan | None:
    """aug{depth} of this frame, or None if not planned; `uses` gives the video's uses in the
    epoch shown, asked for depths above 0 only (aug0 is the decoded frame in every epoch)."""
    info = plan.videos[video_index]
    if not 0 <= frame < info.num_frames:
        return None
    if depth == 0:
        return FramePlan((), (info.height, info.width, 3), "uint8")
    clip = uses().first_use(frame)
    if clip is None or depth > len(clip.step_depths):
        return None
    ops = clip.ops[: clip.step_depths[depth - 1]]
    start = FrameShape(*plan.source_hw(info), "uint8")
    shape, _ = chain_shape([(o.name, o.params) for o in ops], start, 1)
    return FramePlan(ops, (shape.height, shape.width, 3), shape.dtype, clip.source)
