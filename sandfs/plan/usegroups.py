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

_PLAN_SHIFT = 40  # a clip's (plan, video index) as one int64: video indices stay below 2**40


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
        self._video = array("q")  # per use: (plan number << _PLAN_SHIFT) | video index

    def note(self, plan: TaskPlan, row: int, owners: Sequence[str] | None = None,
             lead: Container[str] | None = None, skip: Container[str] = frozenset()) -> None:
        """The uses of the batch at `row` (resolved), all of them, or (`owners`: each slot's
        listed video) those of slots whose owner is held: in `lead` when given, and not in
        `skip`."""
        number = self._plan_of.get(id(plan))
        if number is None:
            number = self._plan_of[id(plan)] = len(self._plans)
            self._plans.append(plan)
        videos = clip_videos(self._table.clips(row))  # a slice of a column, not a clip a time
        slots: Sequence[int] = range(len(videos))
        if owners is not None:
            slots = [slot for slot in slots if owners[slot] not in skip
                     and (lead is None or owners[slot] in lead)]
            videos = array("i", (videos[slot] for slot in slots))
        self._batch.extend([row] * len(slots))
        self._slot.extend(slots)
        base = number << _PLAN_SHIFT
        self._video.extend([base + video for video in videos])

    def grouped(self, window: int) -> WindowVideos:
        """The window's videos: each video's uses as a group of columns, in planning order,
        the videos in the order their first uses came, each with the plan of its first use."""
        if not self._video:
            return WindowVideos(window, UseColumns(self._table, np.zeros(0, np.int32),
                                                   np.zeros(0, np.uint16), np.zeros(1, np.int64)),
                                [], [], [])
        keys, inverse = np.unique(np.frombuffer(self._video, np.int64), return_inverse=True)
        pairs = [(k >> _PLAN_SHIFT, k & ((1 << _PLAN_SHIFT) - 1)) for k in keys.tolist()]
        ids: dict[str, int] = {}  # two plans of one dataset place a path at other indices
        path_id = np.array([ids.setdefault(self._plans[plan].listed[index].path, len(ids))
                            for plan, index in pairs], np.int64)  # the listing's: no probe
        video = path_id[inverse]
        _, first = np.unique(video, return_index=True)  # each video's first use
        rank = np.empty(len(ids), np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(ids))
        video = rank[video]  # videos numbered in the order they came
        order = np.argsort(video, kind="stable")  # each video's uses in planning order
        ends = np.searchsorted(video[order], np.arange(len(ids) + 1))
        slot = np.frombuffer(self._slot, np.uint16)[order]
        columns = UseColumns(self._table, np.frombuffer(self._batch, np.int32)[order], slot, ends)
        firsts = [pairs[k] for k in inverse[order[ends[:-1]]].tolist()]  # (plan, video index)
        plans = self._plans
        infos = [plans[plan].videos[index] for plan, index in firsts]  # its probe, once a video
        return WindowVideos(window, columns, infos, plans, [plan for plan, _ in firsts])
