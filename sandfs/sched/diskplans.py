"""What the active windows keep on disk, for the jobs that keep anything: each window's
`KeptWindow`s (its parts', the latest first) and the videos whose frames are on disk already,
not a `DiskPlan` record and a dict entry a video (~30 bytes a clip of a window whose clips all
fit); a job's plan is made when asked for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.objects import NO_CLIPS, DiskPlan, KeptWindow


def framed(kept: Mapping[str, DiskPlan]) -> list[str]:
    """The videos whose frames `kept` keeps."""
    if isinstance(kept, KeptWindow):
        return kept.framed()
    return [path for path, plan in kept.items() if plan.frames]


class DiskPlans(Mapping[VideoJobKey, DiskPlan]):
    """By job: what pruning keeps of its video (`BatchBoard.disk_plans`, its only writer)."""

    def __init__(self) -> None:
        self._kept: dict[int, list[Mapping[str, DiskPlan]]] = {}
        self._framed: dict[int, set[str]] = {}  # frames on disk already, by window

    def add(self, window: int, kept: Mapping[str, DiskPlan], frames_on_disk: Iterable[str]
            ) -> None:
        """A window (or a part of it) planned: its videos' plans win over earlier parts'."""
        if kept:
            self._kept.setdefault(window, []).append(kept)
        if frames_on_disk:
            self._framed.setdefault(window, set()).update(frames_on_disk)

    def refine(self, window: int, kept: Mapping[str, DiskPlan]) -> None:
        """Pruning's plans for the window from now on; frames kept before stay kept."""
        frames = self._framed.pop(window, set()).union(
            *(framed(part) for part in self._kept.pop(window, ())))
        self.add(window, kept, frames)

    def drop(self, window: int) -> None:
        self._kept.pop(window, None)
        self._framed.pop(window, None)

    def __getitem__(self, job: VideoJobKey) -> DiskPlan:
        plan = next((found for part in reversed(self._kept.get(job.window, ()))
                     if (found := part.get(job.path)) is not None), None)
        if job.path in self._framed.get(job.window, ()):
            plan = DiskPlan(plan.clips if plan else NO_CLIPS, True)
        if plan is None or not (plan.clips or plan.frames):
            raise KeyError(job)
        return plan

    def __iter__(self) -> Iterator[VideoJobKey]:
        """Every job with a plan: O(every kept video of every window), each looked up again
        (tests and diagnostics; the scheduler only looks jobs up)."""
        for window in self._kept.keys() | self._framed.keys():
            paths = set(self._framed.get(window, ())).union(*self._kept.get(window, ()))
            for path in paths:
                job = VideoJobKey(window, path)
                if job in self:
                    yield job

    def __len__(self) -> int:
        """O(everything), as `__iter__`."""
        return sum(1 for _ in self)
