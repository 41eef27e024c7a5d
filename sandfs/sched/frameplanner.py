"""The aug{D} plans of the frames the FUSE layer asks for: a video's uses in a task's epoch
(plan/frames.py) planned in a worker thread, once however many requests ask at the same time,
the latest few kept. Planning on the event loop would stall every other request of the mount
behind it."""

from __future__ import annotations

from collections import OrderedDict

import trio

from sandfs.plan.failures import ViewFailures
from sandfs.plan.frames import FramePlan, VideoUses, frame_plan, video_uses
from sandfs.plan.task import TaskPlan
from sandfs.sched.flights import Flights
from sandfs.threads import limiter

MAX_VIDEOS_KEPT = 256  # (plan, epoch, video) uses kept: a few clips each

UsesKey = tuple[TaskPlan, int, int]  # (plan, epoch, video index); a re-registered task's new
# plan is another key, so nothing planned for the old one is shown


class FramePlanner:
    """Plans aug{D} frames. `plan` plans a video's uses in a worker thread, once however many
    requests ask at the same time; the latest `keep` are kept, so the synchronous calls
    (`frame_plan`, `max_depth`) that follow answer from memory."""

    def __init__(self, failures: ViewFailures | None = None, *,
                 keep: int = MAX_VIDEOS_KEPT) -> None:
        if keep < 1:
            raise ValueError(f"FramePlanner keep must be at least 1, got {keep}")
        self.failures = failures or ViewFailures()  # views that cannot be planned
        self.keep = keep
        self._kept: OrderedDict[UsesKey, VideoUses] = OrderedDict()
        self._flights = Flights()  # (plan, epoch, video) being planned

    async def plan(self, plan: TaskPlan, epoch: int, video_index: int) -> VideoUses:
        """The video's uses in `epoch`, planned off the event loop if not kept."""
        key = (plan, epoch, video_index)
        while (uses := self.planned(*key)) is None:
            if self._flights.in_flight(key):  # another request plans it: take its result (or,
                await self._flights.event(key).wait()  # if it failed, plan here for the error)
                continue
            self._flights.event(key)
            try:
                return self._kept_uses(key, await trio.to_thread.run_sync(
                    video_uses, *key, limiter=limiter("planning")))
            finally:
                self._flights.settle(key)
        return uses

    def planned(self, plan: TaskPlan, epoch: int, video_index: int) -> VideoUses | None:
        """The video's uses if kept (and now the most recently used), else None."""
        key = (plan, epoch, video_index)
        uses = self._kept.get(key)
        if uses is not None:
            self._kept.move_to_end(key)
        return uses

    def uses(self, plan: TaskPlan, epoch: int, video_index: int) -> VideoUses:
        """The video's uses; planned here, on the caller's thread, if not kept (the FUSE layer
        awaits `plan` first, so it only gets here for an epoch that moved on in between)."""
        uses = self.planned(plan, epoch, video_index)
        if uses is None:
            uses = self._kept_uses((plan, epoch, video_index),
                                   video_uses(plan, epoch, video_index))
        return uses

    def forget(self, task: str) -> None:
        """Drop what was kept for an ended task (and with it its plan)."""
        for key in [k for k in self._kept if k[0].name == task]:
            del self._kept[key]

    def _kept_uses(self, key: UsesKey, uses: VideoUses) -> VideoUses:
        for view in uses.failed:
            self.failures.record(key[0].name, view.epoch, view.iteration, view.reason)
        self._kept[key] = uses
        self._kept.move_to_end(key)
        while len(self._kept) > self.keep:
            self._kept.popitem(last=False)
        return uses

    def frame_plan(self, plan: TaskPlan, epoch: int, video_index: int, frame: int,
                   depth: int) -> FramePlan | None:
        """aug{depth} of this frame in `epoch`, or None if not planned."""
        return frame_plan(plan, video_index, frame, depth,
                          lambda: self.uses(plan, epoch, video_index))

    def max_depth(self, plan: TaskPlan, epoch: int, video_index: int, frame: int) -> int:
        return self.uses(plan, epoch, video_index).max_depth(frame)
