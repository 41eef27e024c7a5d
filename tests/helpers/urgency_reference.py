"""The urgency order as it was before its columns (a tuple an entry, a dict of lists of a
batch's jobs): the reference `tests/unit/test_urgency_columns.py` checks `sched/urgency.py`
against, step for step.

Which pending video jobs are worth ranking: the dispatcher ranks the jobs each task needs
soonest, not every pending job. Each task's pending clips in its read order, built once when
jobs are added and walked from a cursor that passes the jobs already done.

Ranking every pending job at every dispatch cost the trio loop O(jobs): with 1,000 videos (two
windows, 2,000 jobs of a few milliseconds each) it spent 28 of the run's 55 CPU-s choosing jobs,
and a batch of 8 small clips took 0.38 s (docs/performance.md#planning-and-scheduling-at-scale). A
job's deadline is the soonest position a reader of its clips stands at, so in each task's order
the first pending jobs are the most urgent; all jobs at the position of the last one taken are
taken too (the videos of one batch rank by their decoding, `policy.priority`)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from sandfs.plan.uses import batches
from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.urgency import _add_grouped_job, _add_job


@dataclass(frozen=True, slots=True)
class UrgencyEntries:
    by_task: Mapping[str, list[tuple[int, VideoJobKey]]]
    jobs_of_view: Mapping[ViewKey, list[VideoJobKey]]
    jobs: Mapping[str, VideoJobKey] = field(default_factory=dict)

URGENT_JOBS_PER_TASK = 32  # ranked per dispatch, and those tied with the last of them
_position = itemgetter(0)  # of an entry: (position in the task's read order, job)


class UrgencyOrder:
    def __init__(self, per_task: int = URGENT_JOBS_PER_TASK) -> None:
        self.per_task = per_task
        self._order: dict[str, list[tuple[int, VideoJobKey]]] | None = None  # None: rebuild
        self._cursor: dict[str, int] = {}
        # lists, not sets: a set of a batch's 8 jobs is 728 bytes (91 a clip), a list 120
        self._jobs_of_view: dict[ViewKey, list[VideoJobKey]] = {}

    def rebuild(self) -> None:
        """Pending clips left (a window dropped): the order is built again when next asked."""
        self._order = None

    def add(self, job: VideoJobKey, use: ClipUse) -> None:
        """One clip became pending again: placed in each reader's order, the cursor moved back
        to it if it is sooner (rebuilding cost O(pending clips) a clip: at 10,000 videos,
        every clip a job could not keep rebuilt 100,000 entries)."""
        if self._order is None:
            return
        _add_job(self._jobs_of_view, use.view, job)
        for task, position in use.readers:
            entries = self._order.setdefault(task, [])
            index = bisect.bisect_right(entries, position, key=_position)
            entries.insert(index, (position, job))
            self._cursor[task] = min(self._cursor.get(task, index), index)

    def add_many(self, added: Iterable[tuple[VideoJobKey, ClipUse]],
                 pending: Mapping[VideoJobKey, Sequence[ClipUse]]) -> None:
        """Many clips became pending (a window, a task's part): merged into each reader's
        order with the entries not passed yet and still pending."""
        if self._order is None:
            return
        new: dict[str, list[tuple[int, VideoJobKey]]] = defaultdict(list)
        for job, use in added:
            _add_job(self._jobs_of_view, use.view, job)
            for task, position in use.readers:
                new[task].append((position, job))
        for task, entries in new.items():
            old = self._order.get(task, [])[self._cursor.get(task, 0):]
            entries += [entry for entry in old if pending.get(entry[1])]
            entries.sort(key=_position)
            self._order[task], self._cursor[task] = entries, 0

    def add_entries(self, added: UrgencyEntries,
                    pending: Mapping[VideoJobKey, Sequence[ClipUse]]) -> None:
        """A window's jobs (`urgency_entries`, made in its planning thread), merged as
        `add_many` merges clips; `pending`: as it was before them. Its lists are taken, not
        copied: the planning thread made them for the board alone."""
        self._built(pending)
        for view, jobs in added.jobs_of_view.items():  # taken, not copied, where new
            found = self._jobs_of_view.setdefault(view, jobs)
            if found is not jobs:
                found += [job for job in jobs if job not in found]
        for task, entries in added.by_task.items():
            old = [e for e in self._order.get(task, [])[self._cursor.get(task, 0):]
                   if pending.get(e[1])]
            if old:
                entries = entries + old
                entries.sort(key=_position)  # two sorted runs: merged in C
            self._order[task], self._cursor[task] = entries, 0

    def forget_window(self, window: int, views: Iterable[ViewKey]) -> None:
        """A window dropped: its jobs leave the order (entries before a cursor are passed)."""
        if self._order is None:
            return
        for task, entries in self._order.items():
            self._order[task] = [e for e in entries[self._cursor[task]:] if e[1].window != window]
            self._cursor[task] = 0
        for view in views:
            self._jobs_of_view.pop(view, None)

    def of_views(self, views: Iterable[ViewKey], pending: Mapping[VideoJobKey,
                 Sequence[ClipUse]]) -> set[VideoJobKey]:
        """The pending jobs with clips for these batches (a blocked reader's)."""
        self._built(pending)
        return {job for view in views for job in self._jobs_of_view.get(view, ())
                if pending.get(job)}

    def _built(self, pending: Mapping[VideoJobKey, Sequence[ClipUse]]
               ) -> dict[str, list[tuple[int, VideoJobKey]]]:
        if self._order is None:
            order: dict[str, list[tuple[int, VideoJobKey]]] = defaultdict(list)
            jobs_of_view: dict[ViewKey, list[VideoJobKey]] = {}
            for job, uses in pending.items():
                for use in uses:
                    _add_grouped_job(jobs_of_view, use.view, job)
                    for task, position in use.readers:
                        order[task].append((position, job))
            for entries in order.values():
                entries.sort(key=_position)
            self._order, self._jobs_of_view = dict(order), dict(jobs_of_view)
            self._cursor = dict.fromkeys(order, 0)
        return self._order


def urgency_entries(window: int, pending: Mapping[str, Sequence[ClipUse]]) -> UrgencyEntries:
    """The window's jobs (its videos' clips `pending`, by path) in each task's read order: one
    entry a job and task, at the soonest position a reader of the task reads one of its clips
    (`urgent` takes a job at its first entry). In a planning thread: a clip at a time."""
    soonest: dict[str, dict[VideoJobKey, int]] = defaultdict(dict)
    jobs_of_view: dict[ViewKey, list[VideoJobKey]] = {}
    jobs: dict[str, VideoJobKey] = {}
    for path, uses in pending.items():
        job = jobs[path] = VideoJobKey(window, path)
        for use in batches(uses):  # no ClipUse made: a window has millions
            _add_grouped_job(jobs_of_view, use.view, job)
            for task, position in use.readers:
                at = soonest[task]
                if position < at.get(job, position + 1):
                    at[job] = position
    by_task = {task: sorted(((p, j) for j, p in at.items()), key=_position)
               for task, at in soonest.items()}
    return UrgencyEntries(by_task, dict(jobs_of_view), jobs)


def soonest_jobs(pending: Mapping[VideoJobKey, Sequence[ClipUse]], busy: set,
                 per_task: int) -> set[VideoJobKey]:
    """What `UrgencyOrder.urgent` chooses, by brute force over the clips pending and with
    none of its code: tasks in name order, each its `per_task` soonest jobs not busy nor
    chosen by a task before it (by the soonest position it reads one of their clips), and
    those tied with the last."""
    tasks = sorted({task for uses in pending.values() for use in uses
                    for task, _ in use.readers})
    chosen: set[VideoJobKey] = set()
    for task in tasks:
        soonest: dict[VideoJobKey, int] = {}
        for job, uses in pending.items():
            for use in uses:
                for reader, position in use.readers:
                    if reader == task:
                        soonest[job] = min(soonest.get(job, position), position)
        free = {job: p for job, p in soonest.items() if job not in busy and job not in chosen}
        if free:
            last = sorted(free.values())[min(per_task, len(free)) - 1]
            chosen |= {job for job, p in free.items() if p <= last}
    return chosen
