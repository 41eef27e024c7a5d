"""Which materialization job runs next — pure code, so it is tested without threads or clocks.

1. Demand-feeding first: a job a blocked reader waits for preempts everything else.
2. Otherwise by deadline: the fewest iterations before a trainer needs the job's first clip.
   Among jobs equally due — the videos of one batch, ready when its last clip is — the one
   with the most decoding before that clip starts first (longest first: the batch is ready
   when the last of them ends, so the longest must not start last).
3. Under memory pressure (above MEMORY_PRESSURE_FRACTION of the limit), shortest job first on
   the remaining work, so the jobs that hold decoded frames finish and release them.

The jobs ranked are those each task needs soonest and those a blocked reader waits for
(`urgency.py`), not every pending job.

Every worker takes jobs whenever there are any: worker threads run at a lower CPU priority
(`work.BACKGROUND_NICE`), so trainers and the FUSE loop come first on a busy CPU. Halving the
workers once every task was ahead (MinatoLoader's queue-occupancy rule) left a core idle while
the next window's decode passes waited, and its start stalled
(docs/performance.md#planning-and-scheduling-at-scale).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sandfs.access import privileged

MEMORY_PRESSURE_FRACTION = 0.8
NOT_NEEDED = 1 << 40  # deadline of work no reader is heading for


@dataclass(frozen=True, slots=True)
class JobState:
    # the job's own: "v{window}:{path}" a video's, "p..." a paused pass's, "a..." a read-back's
    key: str
    window: int  # the window it works for: ranked as a number, as strings put 10 before 9
    demanded: bool  # a reader is blocked on one of its views
    deadline_iterations: int  # iterations before its first pending clip is needed
    remaining_work: int  # unprocessed edges of its subtree: frames to decode + clips to make
    lead_work: int = 0  # decoding before its soonest clip is made: frames x pixels
    owner_load: int = 0  # jobs running for the owner of its readers (the least loaded one)


def priority(job: JobState, *, memory_pressure: bool) -> tuple:
    """The job's rank, lowest first; its window and key last: jobs equal on all else go in
    plan order, the same whatever the process's hash seed (the jobs ranked come as a set)."""
    if memory_pressure and not job.demanded:
        return (1, job.remaining_work, job.deadline_iterations, job.window, job.key)
    # workers are shared fairly between the owners of the tasks: the owner with the fewest
    # jobs running goes first (on a mount of one owner all are equal: deadlines decide)
    return (int(not job.demanded), job.deadline_iterations >= NOT_NEEDED, job.owner_load,
            job.deadline_iterations, -job.lead_work, job.remaining_work, job.window, job.key)


def fifo_priority(job: JobState, *, memory_pressure: bool) -> tuple:
    """The ablation (policy "fifo"): plan order — window, then video path; a window's
    read-backs and paused passes before its new jobs — blind to readers, deadlines and
    memory."""
    return (job.window, job.key)


POLICIES = {"priority": priority, "fifo": fifo_priority}


def share_owner(owner: int | None, registrar: int | None) -> int:
    """Whom a task's jobs count for in the fair share: its owner (-1: the daemon's user, the
    owner of the mount's configs)."""
    if owner is not None:
        return owner
    return -1 if registrar is None else registrar


def makes_ahead_unread(registrar: int | None) -> bool:
    """Are a task's views made ahead before anyone reads it? Those of the mount's configs and
    of root or the daemon's user: yes, so the first epoch is ready. Another user's: no, only
    once a reader opens one of its views, so that tasks nobody reads cost nobody
    anything (docs/deploy.md#limits)."""
    return registrar is None or privileged(registrar)


def pick_next(jobs: Iterable[JobState], *, memory_pressure: bool,
              policy: str = "priority") -> JobState | None:
    rank_of = POLICIES[policy]
    best = None
    best_priority = None
    for job in jobs:
        rank = rank_of(job, memory_pressure=memory_pressure)
        if best_priority is None or rank < best_priority:
            best, best_priority = job, rank
    return best


# A batch needed within this many iterations (or as many as memory holds, if fewer) may push a
# later one, unread, out of memory (to be rebuilt from disk or recomputed); one needed later
# waits on disk for its turn instead: a video's job reaches every epoch of its window, and
# letting far batches take memory only to lose it to nearer ones made batches leave and come
# back again and again.
DISPLACE_HORIZON = 16


def may_displace(deadline_iterations: int, *, demanded: bool, iterations_in_memory: int) -> bool:
    """May a batch needed in `deadline_iterations` push unread ones out of memory, when
    `iterations_in_memory` iterations of every task's batches fit there?"""
    return demanded or deadline_iterations < displace_horizon(iterations_in_memory)


def displace_horizon(iterations_in_memory: int) -> int:
    return min(DISPLACE_HORIZON, max(1, iterations_in_memory))


def under_pressure(used_bytes: int, limit_bytes: int) -> bool:
    return used_bytes > MEMORY_PRESSURE_FRACTION * limit_bytes
