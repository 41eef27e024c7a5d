"""Which job the dispatcher runs next: the states of the jobs worth ranking (the board's and the
paused passes'), ranked by the policy (`policy.pick_next`). It reads the scheduler's state and
writes none (sandfs/sched/__init__.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache

from sandfs.plan.window import ViewKey
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.jobs import Job, VideoJob, VideoJobKey
from sandfs.sched.memory import MemoryLedger
from sandfs.sched.passes import PassBook
from sandfs.sched.policy import JobState, pick_next
from sandfs.sched.windows import WindowBook

JobKey = VideoJobKey | ViewKey


@dataclass(frozen=True, slots=True)
class Choice:
    """A job to start (`key`: a video job's or a batch's to read back), or a paused pass to
    resume."""

    state: JobState
    key: JobKey
    paused: bool


class JobChooser:
    def __init__(self, *, book: WindowBook, board: BatchBoard, carry: CarryBook,
                 memory: MemoryLedger, passes: PassBook, running: Mapping[JobKey, Job],
                 policy: str) -> None:
        self.book, self.board, self.carry = book, board, carry
        self.memory, self.passes, self.running = memory, passes, running
        self.policy = policy

    def best(self) -> tuple[Choice | None, list[Choice]]:
        """The job to run next (None: none is worth ranking), and the paused passes."""
        options = [Choice(s, k, False) for s, k in self.states() if self.due(s, k)]
        paused = [Choice(s, k, True) for s, k in self.passes.states(
            self.running, self.book.deadline_of, self.board.demanded)]
        by_key = {c.state.key: c for c in (*options, *paused)}
        best = pick_next((c.state for c in by_key.values()),
                         memory_pressure=self.memory.under_pressure(), policy=self.policy)
        return (by_key[best.key] if best is not None else None), paused

    def states(self) -> Iterator[tuple[JobState, JobKey]]:
        """(JobState, key) of the jobs not started that are worth ranking."""
        # one ranking asks each batch's deadline once per clip of it (a batch's clips come from
        # several videos' jobs): looked up once, as nothing changes while it ranks
        deadline_of = cache(self.book.deadline_of)
        return self.board.job_states(set(self.running) | self.carry.carried, deadline_of,
                                     self.memory.horizon(), self._owner_load())

    def due(self, state: JobState, key: JobKey) -> bool:
        """Can the job run now? Reading a batch back from disk waits until it is near: picked
        early (the shortest job under memory pressure) and refused, it held back every other
        job, and a window's first batches were not ready when the reader got there."""
        return isinstance(key, VideoJobKey) or self.memory.near(key, demanded=state.demanded)

    def _owner_load(self) -> Callable[[Iterable[ViewKey]], int] | None:
        """With tasks of several owners: how many jobs run for the least loaded owner of some
        batches (policy.priority shares the workers by it); None with one owner."""
        if len(set(self.book.owners.values())) < 2:
            return None
        owners = cache(lambda key: self.book.owners_of((key,)))  # as deadline_of
        load: Counter[int] = Counter()
        for job in self.running.values():
            views = [u.view for u in job.uses] if isinstance(job, VideoJob) else [job.key]
            load.update(set().union(*map(owners, views)))
        return lambda views: min((load[o] for key in views for o in owners(key)), default=0)
