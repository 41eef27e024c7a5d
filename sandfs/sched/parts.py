"""Which videos of a window planned in parts come next (docs/design.md#planning-ahead).

A large window where a task stands is planned in parts that follow its readers: its lead part
(the videos of each task's next batches), then, whenever a reader comes within `ahead` batches
of the first batch not wholly planned, the unplanned videos of the `batches` batches from
there; while no reader waits, the same from the window's first batch not wholly planned (the
sweep, paced by `SweepPace`), so the window is whole in about the time planning it takes,
not once the workers have decoded what is planned; the last few (at most two parts' worth)
at once, as its rest. Each video comes with all its clips in the
window (one pass a video a window). A part costs its own batches: where each task's readers
and sweep got to is kept (`WindowParts`), and only grows, as the planned videos do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TypeVar

import numpy as np

from sandfs.plan.task import TaskPlan
from sandfs.plan.window import batches_holding, lead_indices

REST = frozenset[str]()  # `WindowParts.next`: plan the window's rest, at once
T = TypeVar("T")


class Part(frozenset[str]):
    """A part's videos, as `plan_window`'s lead: the batches holding them come from their
    places in each epoch's order (`WindowParts.batches_of`), not from a walk of the listing
    (250,000 videos: 16 ms a part, as long as planning the part's clips). `swept`: from the
    window's start, no reader near (`SweepPace` times it)."""

    __slots__ = ("batches", "parts", "swept")
    parts: WindowParts
    swept: bool
    batches: int  # from each task's frontier

    def batches_of(self, plan: TaskPlan, epoch: int) -> list[int]:
        return self.parts.batches_of(plan, epoch, self)


class WindowParts:
    """The planner's record of a window planned in parts for `tasks` (the window's own, or a
    task that joined meanwhile): the videos planned, and for each task how far from its
    reader (`reach`, `back`) and from the window's start (`swept`) every batch is planned.
    Changed on the trio thread only, between parts."""

    def __init__(self, window: int, planned: Iterable[str], tasks: Iterable[str], *,
                 leading: bool = False) -> None:
        self.window, self.tasks = window, frozenset(tasks)
        self.leading = leading  # a joining task's lead part is being planned: none due
        self.behind = frozenset[str]()  # planned in fewer epochs than its tasks': due first
        self.planned = set(planned)
        self.reach: dict[str, int] = {}
        self.swept: dict[str, int] = {}
        self.back: dict[str, int] = {}  # a reader's frontier behind its reach, from its jump
        self._looked: dict[str, int] = {}  # the position a back frontier was last looked from
        self._places: dict[tuple[str, int], np.ndarray] = {}  # each listed video's, by epoch
        self._picked: dict[str, tuple[list, int]] = {}  # a part's video: (listing, index)
        self._alike: dict[tuple[int, int], tuple] = {}  # two listings (kept), equal or not
        self.pace = SweepPace()  # its swept parts' size and share

    def add(self, videos: Iterable[str]) -> None:
        self.planned.update(videos)
        for path in videos:
            self._picked.pop(path, None)

    def next(self, plans: Sequence[TaskPlan], positions: Mapping[str, int], *, ahead: int,
             batches: int, sweep: Callable[[], bool], sweep_batches: int = 0
             ) -> frozenset[str] | None:
        """The videos of the next part (`REST`: the rest; None: none is due): a reader within
        `ahead` batches of its planned frontier (`batches` batches), or else, when `sweep()`,
        the window's first `sweep_batches` (default: its pace's size, `batches` at least) not
        planned. `plans`: the book's; those of `tasks` count."""
        if self.leading:
            return None
        if self.behind:
            return self.behind
        plans = [p for p in plans if p.name in self.tasks and p.window_epochs(self.window)]
        if not plans or len(self.planned) >= _listed(plans):  # its tasks left, or all planned
            return REST
        due = [(p, self._reader_frontier(p, positions[p.name], ahead)) for p in plans
               if self._stands_in(p, positions[p.name])]
        due = [(p, at) for p, at in due if at < self._end(p) and at - positions[p.name] < ahead]
        count, swept_now = batches, False
        if not due:
            swept = [(p, self._frontier(p, self._start(p), self.swept)) for p in plans]
            if all(at >= self._end(p) for p, at in swept):
                return REST  # every batch planned: what is left no task reads (a shard's)
            if sweep():
                due = [(p, at) for p, at in swept if at < self._end(p)]
                count = max(batches, sweep_batches or self.pace.batches)
                swept_now = True
        if not due:
            return None
        most = count * max(p.sampling.videos_per_batch for p in plans)  # a swept part: its own
        if 2 * most >= _listed(plans) - len(self.planned):
            return REST
        part: set[str] = set()
        for plan, at in due:
            for index in range(at, min(at + count, self._end(plan))):
                part |= self._unplanned(plan, index, self._picked)
        found = Part(part)
        found.parts, found.swept, found.batches = self, swept_now, count
        return found or None

    def batches_of(self, plan: TaskPlan, epoch: int, part: frozenset[str]) -> list[int]:
        """The iterations of the task's `epoch` whose batches hold a video of `part` (planned
        in a thread; its `next` was on the trio thread before)."""
        picked = [self._picked.get(path, (None, 0)) for path in part]
        listings = {id(listing): listing for listing, _ in picked}
        if not all(self._same(listing, plan.listed) for listing in listings.values()):
            return batches_holding(plan, epoch, lead_indices(plan, part))  # another dataset's
        places = self._places.get((plan.name, epoch))
        if places is None:
            order = plan.epoch_order(epoch)
            places = self._places[plan.name, epoch] = np.full(len(plan.listed), -1, np.int32)
            places[order] = np.arange(len(order), dtype=np.int32)
        at = places[np.array([index for _, index in picked], np.int64)]
        iterations = np.unique(at[at >= 0] // plan.sampling.videos_per_batch)
        return iterations[iterations < plan.iterations_per_epoch].tolist()

    def _same(self, listing: Sequence | None, listed: Sequence) -> bool:
        """Do a video's index in `listing` and in `listed` name one video? Trials of one
        dataset list equal tuples, not one: compared once a pair, in the planning thread
        (250,000 videos: 0.4 ms over one scan's records, 40 ms over equal copies)."""
        if listing is listed or listing is None:
            return listing is listed
        known = self._alike.get((id(listing), id(listed)))
        if known is None:  # the listings kept with the answer: their ids stay theirs
            known = self._alike[id(listing), id(listed)] = (listing, listed, listing == listed)
        return known[2]

    def _reader_frontier(self, plan: TaskPlan, position: int, ahead: int) -> int:
        """The task's reader's frontier: from its reach, or, once it went back to within
        `ahead` batches of one not planned, from there (`back`) until that frontier is at its
        reach again: the frontier only grows, and a reader that jumped ahead, then back,
        waited for the workers to idle."""
        name, reach = plan.name, self.reach.get(plan.name, position)
        if self._looked.get(name) != position:  # once a position: planned videos only grow
            self._looked[name] = position
            near = range(position, min(position + ahead, reach))
            at = next((i for i in near if self._unplanned(plan, i, {})), None)
            if at is not None:
                self.back[name] = at
        if name in self.back:
            at = self._frontier(plan, position, self.back)
            if at < reach:
                return at
            del self.back[name]
        return self._frontier(plan, position, self.reach)

    def _frontier(self, plan: TaskPlan, index: int, marks: dict[str, int]) -> int:
        """The first batch from `index` on (past those `marks` says are planned) holding a
        video not planned; `marks` moves there."""
        index, end = max(index, marks.get(plan.name, index)), self._end(plan)
        while index < end and not self._unplanned(plan, index, {}):
            index += 1
        marks[plan.name] = index
        return index

    def _unplanned(self, plan: TaskPlan, index: int, picked: dict[str, tuple[list, int]]
                   ) -> set[str]:
        """The videos not planned of the task's batch at `index`, each noted in `picked`."""
        epoch, iteration = divmod(index, plan.iterations_per_epoch)
        found = set()
        for i in plan.batch_slots(epoch, iteration):
            path = plan.listed[i].path
            if path not in self.planned:
                found.add(path)
                picked[path] = (plan.listed, i)
        return found

    def _stands_in(self, plan: TaskPlan, position: int) -> bool:
        return self._start(plan) <= position < self._end(plan)

    def _start(self, plan: TaskPlan) -> int:
        return plan.window_epochs(self.window).start * plan.iterations_per_epoch

    def _end(self, plan: TaskPlan) -> int:
        return plan.window_epochs(self.window).stop * plan.iterations_per_epoch


def _listed(plans: Sequence[TaskPlan]) -> int:
    """The videos the tasks list, each dataset once (a search's trials read the same files)."""
    datasets = {(p.cfg.dataset.video_dataset_path, p.identity.key): len(p.listed) for p in plans}
    return sum(datasets.values())


def lead_part(plans: Iterable[TaskPlan], positions: Mapping[str, int], window: int,
              least_clips: int, batches: int) -> frozenset[str] | None:
    """The videos of the next `batches` batches of each task standing in the window, when the
    tasks' part of the window holds `least_clips` clips or more (None: plan it whole)."""
    plans = [p for p in plans if p.window_epochs(window)]
    clips = sum(len(p.window_epochs(window)) * len(p.videos) * p.sampling.samples_per_video
                for p in plans)
    if clips < least_clips:
        return None
    lead: set[str] = set()
    for plan in plans:
        at = positions[plan.name]
        for index in range(at, at + batches):
            epoch, iteration = divmod(index, plan.iterations_per_epoch)
            if epoch < plan.epochs and plan.window_of(epoch) == window:
                lead |= {plan.listed[i].path for i in plan.batch_slots(epoch, iteration)}
    return frozenset(lead) or None


class SweepPace:
    """When a window's parts may be planned from its start while the workers are busy (the
    sweep), and how many batches such a part takes; one for each `WindowParts`, so a size
    grown on one window's cheap batches is not used for another's. A part's seconds are the
    CPU of its planning thread and of its merge into the board on the trio thread (`timed`,
    each O(the task's pending jobs)): at a `share` of the time (`planned`'s), after a part of
    t seconds the next waits t * (1/share - 1) (1: back to back, the jobs running beside
    them; 0: none). The next part is sized to take `part_s` (this one's batches scaled by
    `part_s` over its seconds, growing 4x at most), so a reader coming meanwhile waits about
    `part_s` of CPU for the swept part before its own (more while the machine is loaded),
    and the merges are paid a few hundred times a window, not 16 batches at a time (250,000
    videos: ~2,000 parts)."""

    def __init__(self, *, part_s: float = 0.5, most: int = 1 << 16) -> None:
        self.part_s = part_s
        self.batches = 0  # the next swept part's (0: the readers' size, as none was timed)
        self.most = most
        self.next_s = -math.inf  # when the next swept part is due
        self.cpu_s: float | None = None  # the part's so far (`timed`); None: none timed

    def due(self, now_s: float) -> bool:
        return now_s >= self.next_s

    def timed(self, plan: Callable[..., T], *args: object, **kwargs: object) -> T:
        """`plan(...)`, its thread's CPU seconds added to the part's (`cpu_s`): a part is sized
        by its CPU, not by the wall time a loaded machine stretches (load 8 on 2 cores: 3-4x)."""
        started = time.thread_time()
        try:
            return plan(*args, **kwargs)
        finally:
            self.cpu_s = (self.cpu_s or 0.0) + time.thread_time() - started

    def planned(self, batches: int, started_s: float, now_s: float, share: float = 1.0
                ) -> None:
        """A swept part of `batches` batches planned from `started_s` to `now_s`: it took the
        CPU `timed` counted, else that wall time."""
        seconds = self.cpu_s if self.cpu_s is not None else now_s - started_s
        self.cpu_s = None
        self.next_s = now_s + seconds * (1 / share - 1) if share > 0 else math.inf
        scale = min(self.part_s / seconds, 4.0) if seconds > 0 else 4.0
        self.batches = min(max(round(batches * scale), 1), self.most)


def timed_by(pace: SweepPace | None, step: Callable[..., T]) -> Callable[..., T]:
    """`step`, its CPU counted in the swept part `pace` times now (its planning thread's, and
    its merge's on the trio thread: both hold back a reader coming meanwhile)."""
    return step if pace is None else partial(pace.timed, step)
