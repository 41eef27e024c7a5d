"""Running video jobs between their start and their end: the clips each has handed over so
far, and the ones paused between two clips (no thread runs them; their decoder, frames and
memory stay). The scheduler asks this book what is left of a pass, which pass to resume, and
whether a pass should pause; it owns no other state.

A pass pauses only for a job a blocked reader waits for, when it has no clip that reader
waits for left, at most one paused pass per worker: pausing for any job needed sooner kept
more passes open and left less memory to carry frames ahead
(docs/performance.md#planning-and-scheduling-at-scale).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.jobs import Job, JobResult, VideoJob, VideoJobKey
from sandfs.sched.objects import Spot
from sandfs.sched.policy import NOT_NEEDED, JobState

Step = Callable[[], JobResult | None]  # runs a job on in a worker thread; None: it paused


class PassBook:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.paused: dict[VideoJobKey, Step] = {}  # by key, what resumes it
        # told to pause, not paused yet: counted, so that passes asking meanwhile see them (a
        # worker process holds each paused pass; the pool has one more per worker, no more)
        self.pausing: set[VideoJobKey] = set()
        self.handed_over: dict[VideoJobKey, set[Spot]] = {}
        self.fruitless = False  # a pause freed a worker no new job took: none till a job ends

    def room(self) -> bool:
        """May one more pass pause? At most one paused (or pausing) a worker."""
        return len(self.paused) + len(self.pausing) < self.workers

    def will_pause(self, key: VideoJobKey) -> None:
        """A pass was told to pause: it does at once, its run ending (`pause`)."""
        self.pausing.add(key)

    def pause(self, key: VideoJobKey, step: Step) -> None:
        """A pass paused between two clips; `step` resumes it."""
        self.pausing.discard(key)
        self.paused[key] = step

    def resume(self, key: VideoJobKey) -> Step:
        return self.paused.pop(key)

    def no_job_took_the_worker(self) -> None:
        """The worker a pause freed found no new job (short of memory): no pass pauses
        again until a job ends and frees some."""
        self.fruitless = True

    def hand_over(self, job: VideoJob, part: JobResult) -> None:
        self.handed_over.setdefault(job.key, set()).update(Spot.of(p.use) for p in part.placed)

    def ended(self, key: VideoJobKey | ViewKey) -> None:
        """A job ended: its memory came free."""
        self.handed_over.pop(key, None)
        self.pausing.discard(key)  # it failed as it was told to pause
        self.fruitless = False

    def remaining(self, job: VideoJob) -> list[ClipUse]:
        handed = self.handed_over.get(job.key, set())
        return [u for u in job.uses if Spot.of(u) not in handed]

    def unmade_views(self, job: Job) -> set[ViewKey]:
        """The batches a failed job leaves without a clip: those whose clips it handed over
        (exact, made of frames checked before the failure) lose nothing."""
        if not isinstance(job, VideoJob):
            return job.views
        return {u.view for u in self.remaining(job)}

    def states(self, running: Mapping, deadline_of: Callable[[ViewKey], int],
               demanded: set[ViewKey]) -> Iterator[tuple[JobState, VideoJobKey]]:
        """(JobState, key) of each paused pass, from the clips it has left."""
        for key in self.paused:
            rest = self.remaining(running[key])
            yield JobState(f"p{key.window}:{key.path}", key.window,
                           any(u.view in demanded for u in rest),
                           min((deadline_of(u.view) for u in rest), default=NOT_NEEDED),
                           len(rest)), key

    def may_pause(self, job: VideoJob, in_threads: int, demanded: set[ViewKey]) -> bool:
        """May this pass pause now, if a new job a blocked reader waits for is due?"""
        return (not self.fruitless and in_threads >= self.workers and bool(demanded)
                and not any(u.view in demanded for u in self.remaining(job)))
