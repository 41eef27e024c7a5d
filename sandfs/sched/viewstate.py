"""A batch of an active window as the board tracks it; jobs keep the one they started with, so
a batch dropped and planned again (a new state) takes nothing from them."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from sandfs.npy import NpyBuffer
from sandfs.plan.task import TaskPlan, ViewPlan

NO_SLOTS: frozenset[int] = frozenset()


@dataclass(slots=True)
class ViewState:
    """A batch of an active window: which slots are filled, in memory and on disk. Its sets
    are made when a first slot comes (the board holds every batch of its windows: most stay
    empty), and change only through `add_on_disk` and `add_in_memory`."""

    plan: TaskPlan
    epoch: int
    iteration: int
    view: ViewPlan  # held while the batch is active: a plan's cache keeps its last 4,096 only
    on_disk: AbstractSet[int] = NO_SLOTS
    buffer: NpyBuffer | None = None
    in_memory: AbstractSet[int] = NO_SLOTS

    @classmethod
    def planned(cls, plan: TaskPlan, epoch: int, iteration: int,
                view: ViewPlan | None = None) -> ViewState:
        """`view`: the batch resolved already (by the window's planning), else resolved now."""
        return cls(plan, epoch, iteration, view or plan.view_plan(epoch, iteration))

    def add_on_disk(self, slots: Iterable[int]) -> None:
        if isinstance(self.on_disk, set):
            self.on_disk.update(slots)
        elif not self.on_disk and isinstance(slots, frozenset):
            self.on_disk = slots or NO_SLOTS  # the planner's own set: a later add copies it
        else:
            self.on_disk = {*self.on_disk, *slots} or NO_SLOTS

    def add_in_memory(self, slot: int) -> None:
        if not isinstance(self.in_memory, set):
            self.in_memory = set(self.in_memory)
        self.in_memory.add(slot)

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
