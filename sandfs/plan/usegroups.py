"""A window's uses grouped by video in numpy, not a clip at a time in Python: each batch's
clips are noted as columns (the batch, the plan and video index of each clip, its slot) as
the window is planned, and grouped once at the end by a stable argsort of the clips' videos,
so that each video's uses keep the order they were planned in, and the videos the order
their first use came in (what a walk clip by clip made: `test_window_parts.py`'s digests).
"""

from __future__ import annotations

from array import array
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sandfs.plan.cliptable import clip_videos
from sandfs.plan.uses import UseColumns
from sandfs.plan.windowvideos import WindowVideos

if TYPE_CHECKING:
    from sandfs.plan.batchcolumns import BatchColumns
    from sandfs.plan.task import TaskPlan


class UseGroups:
    """The uses of a window noted a batch at a time, grouped by video at the end (`grouped`):
    a batch is its row's number in the window's batch columns, no object (a `TableRow` a
    batch a part was ~1.0M objects at 250,000 videos planned in ~150 parts)."""

    def __init__(self, table: BatchColumns) -> None:
        self._table = table  # the rows the batches noted are of
        self._plans: list[TaskPlan] = []
        self._plan_of: dict[int, int] = {}  # id of a plan -> its number
        self._batch = array("i")  # per use: its batch's row in `_table`
        self._slot = array("H")
        self._index = array("i")  # per use: its video's index in its plan's listing
        self._plan = array("H")  # per use: its plan's number

    def note(self, plan: TaskPlan, row: int, owners: Sequence[str] | None = None,
             lead: Container[str] | None = None, skip: Container[str] = frozenset()) -> None:
        """The uses of the batch at `row` (resolved), all of them, or (`owners`: each slot's
        listed video) those of slots whose owner is held: in `lead` when given, and not in
        `skip`."""
        number = self._number(plan)
        videos = clip_videos(self._table.clips(row))  # a slice of a column, not a clip a time
        slots: Sequence[int] = range(len(videos))
        if owners is not None:
            slots = [slot for slot in slots if owners[slot] not in skip
                     and (lead is None or owners[slot] in lead)]
            videos = array("i", (videos[slot] for slot in slots))
        self._batch.extend([row] * len(slots))
        self._slot.extend(slots)
        self._index.fromlist(list(videos))  # a column's type may be narrower
        self._plan.extend([number] * len(slots))

    def note_rows(self, plan: TaskPlan, rows: Sequence[int]) -> None:
        """`note` of all the uses of these batches (resolved), read at once from the columns
        of the clip table they are ranges of (one at a time where they are not one's)."""
        spans = self._table.table_spans(rows)
        if spans is None:
            for row in rows:
                self.note(plan, row)
            return
        table, start, count = spans
        count = count.astype(np.int64)
        slot = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        video = np.frombuffer(table.video, np.dtype(table.video.typecode))
        self._batch.frombytes(np.repeat(np.asarray(rows, np.int32), count).tobytes())
        self._slot.frombytes(slot.astype(np.uint16).tobytes())
        self._index.frombytes(video[np.repeat(start, count) + slot].astype(np.int32).tobytes())
        self._plan.frombytes(np.full(len(slot), self._number(plan), np.uint16).tobytes())

    def _number(self, plan: TaskPlan) -> int:
        number = self._plan_of.get(id(plan))
        if number is None:
            number = self._plan_of[id(plan)] = len(self._plans)
            self._plans.append(plan)
        return number

    def grouped(self, window: int) -> WindowVideos:
        """The window's videos: each video's uses as a group of columns, in planning order,
        the videos in the order their first uses came, each with the plan of its first use.
        Found with one stable argsort of the uses' videos and no object a video or use: at
        250,000 videos a window's 1.25M uses grouped with tuples and a dict of paths held
        ~130 bytes a use at their peak, and left the heap fragmented."""
        if not self._index:
            return WindowVideos(window, UseColumns(self._table, np.zeros(0, np.int32),
                                                   np.zeros(0, np.uint16), np.zeros(1, np.int64)),
                                [], [], [])
        video = self._path_ids()
        order = np.argsort(video, kind="stable")  # by video, each video's uses as planned
        starts = np.flatnonzero(np.diff(video[order], prepend=-1))  # each video's first place
        del video
        first = order[starts]  # each video's first use (the sort is stable)
        counts = np.diff(starts, append=len(order))
        rank = np.argsort(first)  # the videos in the order their first uses came
        ends = np.zeros(len(rank) + 1, np.int64)
        np.cumsum(counts[rank], out=ends[1:])
        # each use's place in `order`, the videos taken in `rank` order
        order = order[np.repeat(starts[rank] - ends[:-1], counts[rank])
                      + np.arange(len(order))].astype(np.int32)
        del starts, counts
        columns = UseColumns(self._table, np.frombuffer(self._batch, np.int32)[order],
                             np.frombuffer(self._slot, np.uint16)[order], ends)
        del order
        first = first[rank]
        plan_of = np.frombuffer(self._plan, np.uint16)[first]
        index = np.frombuffer(self._index, np.int32)[first]
        plans = self._plans
        infos: list = [None] * len(first)  # their probes, once, a task's read at once
        for plan in np.unique(plan_of).tolist():
            places = np.flatnonzero(plan_of == plan)
            found = plans[plan].videos.infos(index[places].tolist())
            if len(places) == len(infos):
                infos = found
            else:
                for place, info in zip(places.tolist(), found, strict=True):
                    infos[place] = info
        return WindowVideos(window, columns, infos, plans, plan_of.tolist())

    def _path_ids(self) -> np.ndarray:
        """Each use's video as a number for its path: its listing index where every plan
        places the same listing (tasks of one dataset), else a number a path."""
        index = np.frombuffer(self._index, np.int32)
        listings = _listings(self._plans)
        if len(set(listings)) == 1:
            return index
        plan, ids = np.frombuffer(self._plan, np.uint16), {}  # two listings: by path
        video = np.empty(len(index), np.int64)
        for number, own in enumerate(self._plans):
            mine = plan == number
            used, where = np.unique(index[mine], return_inverse=True)
            listed = own.listed
            video[mine] = np.array([ids.setdefault(listed[i].path, len(ids))
                                    for i in used.tolist()], np.int64)[where]
        return video


def _listings(plans: Sequence[TaskPlan]) -> list[int]:
    """Each plan's listing as a number, equal for plans placing equal listings (a task's plan
    holds its own tuple of the scan's records: compared in C, its records the same objects)."""
    found: list[Sequence] = []
    numbers = []
    for plan in plans:
        number = next((n for n, listed in enumerate(found)
                       if listed is plan.listed or listed == plan.listed), len(found))
        if number == len(found):
            found.append(plan.listed)
        numbers.append(number)
    return numbers
