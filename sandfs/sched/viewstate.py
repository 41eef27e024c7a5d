"""A batch of an active window as the board tracks it; jobs keep the one they started with, so
a batch dropped and planned again (a new state) takes nothing from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from sandfs.npy import NpyBuffer
from sandfs.plan.task import TaskPlan, ViewPlan


@dataclass(slots=True)
class ViewState:
    """A batch of an active window: which slots are filled, in memory and on disk."""

    plan: TaskPlan
    epoch: int
    iteration: int
    view: ViewPlan  # held while the batch is active: a plan's cache keeps its last 4,096 only
    on_disk: set[int] = field(default_factory=set)
    buffer: NpyBuffer | None = None
    in_memory: set[int] = field(default_factory=set)

    @classmethod
    def planned(cls, plan: TaskPlan, epoch: int, iteration: int,
                view: ViewPlan | None = None) -> ViewState:
        """`view`: the batch resolved already (by the window's planning), else resolved now."""
        return cls(plan, epoch, iteration, view or plan.view_plan(epoch, iteration))

    @property
    def slots(self) -> int:
        return len(self.view.clips)

    @property
    def nbytes(self) -> int:
        return self.plan.view_nbytes(self.epoch, self.iteration)

    @property
    def covered(self) -> bool:
        """Does every slot have its clip, on disk or in memory (no video job owes it one)?"""
        return len(self.on_disk | self.in_memory) == self.slots
