"""aug{D} of single frames: what depth D of one frame's augmentation is in a task's epoch (the
ops of the first clip of that epoch that uses the frame, up to its D-th step) and its shape."""

from __future__ import annotations

from dataclasses import dataclass

from sandfs.config.condition import ConditionError
from sandfs.npy import npy_nbytes
from sandfs.ops import chain_shape
from sandfs.ops.base import FrameShape, OpInstance
from sandfs.plan.failures import ViewFailures
from sandfs.plan.task import StreamClip, TaskPlan

FrameUses = dict[tuple[int, int], StreamClip]  # (video, frame) -> the first clip using it


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


class FramePlanner:
    """Plans aug{D} frames; keeps the frame uses of the one epoch asked for last."""

    def __init__(self, failures: ViewFailures | None = None) -> None:
        self._uses: dict[tuple[str, int], FrameUses] = {}
        self.failures = failures or ViewFailures()  # views that cannot be planned

    def frame_uses(self, plan: TaskPlan, epoch: int) -> FrameUses:
        key = (plan.name, epoch)
        if key not in self._uses:
            uses: FrameUses = {}
            for iteration in range(plan.iterations_per_epoch):
                try:
                    view = plan.view_plan(epoch, iteration)
                except ConditionError as exc:  # its frames have no aug{D}; the others do
                    self.failures.record(plan.name, epoch, iteration, str(exc))
                    continue
                for clip in view.clips:
                    for index in clip.frame_indices:
                        uses.setdefault((clip.video_index, index), clip)
            self._uses = {key: uses}  # keep one epoch: it is what aug{D} shows
        return self._uses[key]

    def frame_plan(self, plan: TaskPlan, epoch: int, video_index: int, frame: int,
                   depth: int) -> FramePlan | None:
        """aug{depth} of this frame in `epoch`, or None if not planned."""
        info = plan.videos[video_index]
        if not 0 <= frame < info.num_frames:
            return None
        if depth == 0:
            return FramePlan((), (info.height, info.width, 3), "uint8")
        clip = self.frame_uses(plan, epoch).get((video_index, frame))
        if clip is None or depth > len(clip.step_depths):
            return None
        ops = clip.ops[: clip.step_depths[depth - 1]]
        start = FrameShape(*plan.source_hw(info), "uint8")
        shape, _ = chain_shape([(o.name, o.params) for o in ops], start, 1)
        return FramePlan(ops, (shape.height, shape.width, 3), shape.dtype, clip.source)

    def max_depth(self, plan: TaskPlan, epoch: int, video_index: int, frame: int) -> int:
        clip = self.frame_uses(plan, epoch).get((video_index, frame))
        return 0 if clip is None else len(clip.step_depths)
