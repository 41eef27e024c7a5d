"""Which pending video jobs are worth ranking: the dispatcher ranks the jobs each task needs
soonest, not every pending job. Each task's pending clips in its read order, built once when
jobs are added and walked from a cursor that passes the jobs already done.

Ranking every pending job at every dispatch cost the trio loop O(jobs): with 1,000 videos (two
windows, 2,000 jobs of a few milliseconds each) it spent 28 of the run's 55 CPU-s choosing jobs,
and a batch of 8 small clips took 0.38 s (docs/performance.md §25). A job's deadline is the
soonest position a reader of its clips stands at, so in each task's order the first pending
jobs are the most urgent; all jobs at the position of the last one taken are taken too (the
videos of one batch rank by their decoding, `policy.priority`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.jobs import VideoJobKey

URGENT_JOBS_PER_TASK = 32  # ranked per dispatch, and those tied with the last of them


class UrgencyOrder:
    def __init__(self, per_task: int = URGENT_JOBS_PER_TASK) -> None:
        self.per_task = per_task
        self._order: dict[str, list[tuple[int, VideoJobKey]]] | None = None  # None: rebuild
        self._cursor: dict[str, int] = {}
        self._jobs_of_view: dict[ViewKey, set[VideoJobKey]] = {}

    def added(self) -> None:
        """Clips became pending: the order is built again when next asked."""
        self._order = None

    def urgent(self, pending: Mapping[VideoJobKey, Sequence[ClipUse]],
               busy: set) -> set[VideoJobKey]:
        """The pending jobs (not `busy`) each task needs soonest."""
        order = self._built(pending)
        chosen: set[VideoJobKey] = set()
        for task, entries in order.items():
            start = self._cursor[task]
            while start < len(entries) and not pending.get(entries[start][1]):
                start += 1  # done: never pending again unless clips are added (a rebuild)
            self._cursor[task] = start
            taken, last = 0, None
            for index in range(start, len(entries)):
                position, job = entries[index]
                if taken >= self.per_task and position != last:
                    break
                if job in chosen or job in busy or not pending.get(job):
                    continue
                chosen.add(job)
                taken, last = taken + 1, position
        return chosen

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
            jobs_of_view: dict[ViewKey, set[VideoJobKey]] = defaultdict(set)
            for job, uses in pending.items():
                for use in uses:
                    jobs_of_view[use.view].add(job)
                    for task, position in use.readers:
                        order[task].append((position, job))
            for entries in order.values():
                entries.sort(key=lambda entry: entry[0])
            self._order, self._jobs_of_view = dict(order), dict(jobs_of_view)
            self._cursor = dict.fromkeys(order, 0)
        return self._order
