"""Job records: what a worker thread is given (frozen when it starts) and what it hands back.

- a *video job*: one video, one window: its frames come from ONE selective decode pass (or from
  frames kept on disk), and every clip it takes is augmented once and written into its batch's
  slot in memory and/or to disk.
- an *assembly job*: one batch whose clips are on disk, read back into memory.
- a *planned window*: what a planning thread hands back (`PlannedWindow`).

A job that raises fails every batch it fills. A step that fails on a clip fails only that
clip's batch (`Failed`): the other tasks sharing the video's decode pass get theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from sandfs.materialize import FrameKey, clip_frame_keys
from sandfs.ops.base import OpInstance
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.window import ClipUse, VideoWork, ViewKey, WindowPlan
from sandfs.sched.objects import DiskPlan, Spot
from sandfs.sched.viewjobs import ViewJobs
from sandfs.sched.viewstate import ViewState


@dataclass(frozen=True, slots=True)
class VideoJobKey:
    """One video in one window: the unit of a decode pass. `number`: the job's number where
    the board's pending clips made the key (`PendingClips.key_of`), not part of its identity
    (-1: none)."""

    window: int
    path: str
    number: int = field(default=-1, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Carry:
    """Frames a decode pass makes for a later window of its video."""

    keys: frozenset[FrameKey]
    deadline: int  # the window's first reader position
    firsts: Mapping[FrameKey, OpInstance]  # `first_ops` of its clips: frames are kept after them


@dataclass(frozen=True, slots=True)
class VideoJob:
    key: VideoJobKey
    work: VideoWork
    uses: tuple[ClipUse, ...]
    to_memory: frozenset[Spot]  # written into batch buffers
    to_disk: frozenset[Spot]  # persisted
    save_frames: bool  # keep this window's frames on disk
    frames_on_disk: bool  # read them from disk instead of decoding
    frame_bytes: int  # decoded frames held while it runs
    carry: Mapping[int, Carry]  # frames later windows need, by window: decoded in this pass
    deadlines: Mapping[ViewKey, int]  # view -> first reader position
    layouts: Mapping[ViewKey, str]  # view -> its task's layout
    # the batches it fills, as they were when it started: a batch dropped with its window (and
    # maybe planned again since, with a fresh buffer) no longer takes this job's results
    states: Mapping[ViewKey, ViewState] = field(repr=False)
    # clips of the video's next window (active too) made by this pass, to disk, instead of
    # carrying their frames there (`Admission.video`): the job of that window they came from
    ahead: frozenset[Spot] = frozenset()
    ahead_of: VideoJobKey | None = None

    def without(self, views: set[ViewKey]) -> VideoJob:
        """This job without the clips of `views` (batches that failed before it started)."""
        return replace(self, uses=tuple(u for u in self.uses if u.view not in views),
                       to_memory=frozenset(s for s in self.to_memory if s.view not in views),
                       to_disk=frozenset(s for s in self.to_disk if s.view not in views),
                       ahead=frozenset(s for s in self.ahead if s.view not in views))

    def owner(self, use: ClipUse) -> VideoJobKey:
        """The job whose pending clip `use` was: this one, or the next window's (`ahead`)."""
        return self.ahead_of if self.ahead_of and Spot.of(use) in self.ahead else self.key

    @property
    def frames(self) -> set[FrameKey]:
        """What to decode: every frame of the window when they are to be kept on disk (later
        jobs of this video then read them instead of decoding), else what the clips need."""
        if self.save_frames and not self.frames_on_disk:
            return self.work.frame_keys
        return {key for use in self.uses for key in clip_frame_keys(use.clip)}

    @property
    def decode_keys(self) -> set[FrameKey]:
        """What the decode pass produces: this window's frames, those of the clips it makes
        ahead, and those it carries."""
        ahead = {key for use in self.uses if Spot.of(use) in self.ahead
                 for key in clip_frame_keys(use.clip)}
        return self.frames.union(ahead, *(c.keys for c in self.carry.values()))

    @property
    def views(self) -> set[ViewKey]:
        return {use.view for use in self.uses}


@dataclass(frozen=True, slots=True)
class AssemblyJob:
    key: ViewKey
    plan: TaskPlan
    view: ViewPlan
    slots: tuple[int, ...]  # on disk, not in memory yet
    states: Mapping[ViewKey, ViewState] = field(repr=False)
    frame_bytes: int = 0

    @property
    def views(self) -> set[ViewKey]:
        return {self.key}


Job = VideoJob | AssemblyJob


@dataclass(frozen=True, slots=True)
class Placed:
    """A clip a job made: in its batch's buffer, on disk, or (neither) to be made later."""

    use: ClipUse
    in_memory: bool
    on_disk: bool


@dataclass(frozen=True, slots=True)
class Failed:
    """A clip a job could not make because one of its steps raised, crashed or hung: its batch
    fails (EIO, for the tasks that read it) and the job's other clips are placed as usual."""

    use: ClipUse
    reason: str


@dataclass(frozen=True, slots=True)
class JobResult:
    placed: tuple[Placed, ...]
    saved: tuple[VideoJobKey, ...] = ()  # (window, video)s whose frames are all on disk now
    # frames decoded for later windows, by window: written once the batches are handed over
    carried: Mapping[int, Mapping[FrameKey, np.ndarray]] = field(default_factory=dict)
    failed: tuple[Failed, ...] = ()


# a task's entries in read order: (soonest position, job) as two columns (`urgency.py`)
TaskOrder = tuple[np.ndarray, np.ndarray]  # int64 positions, sorted; int64 job numbers


@dataclass(frozen=True, slots=True)
class UrgencyEntries:
    """A window's pending jobs in each task's read order (`urgency.urgency_entries`), made in
    its planning thread: the event loop merges them, not a clip at a time. A job is its
    video's number in `videos` (no key object a video: the board numbers them)."""

    window: int
    # made for the board, which takes them as they are (`UrgencyOrder.add_entries`)
    by_task: Mapping[str, TaskOrder]
    views: ViewJobs  # the jobs with clips for each batch, once each
    videos: Mapping[str, Sequence[ClipUse]]  # the clips they were made from, by path

    @property
    def jobs(self) -> list[VideoJobKey]:
        """Each video's job, in the order of `videos` (made when asked)."""
        return [VideoJobKey(self.window, path) for path in self.videos]


@dataclass(frozen=True, slots=True)
class PlannedWindow:
    """What a planning thread hands back: a window (or its part), what is on disk for it, and
    its clips to make, as the board takes them (`BatchBoard.add_window`)."""

    plan: WindowPlan
    on_disk: Mapping[ViewKey, frozenset[int]]  # slots of each batch on disk already
    frames_on_disk: frozenset[str]  # videos whose frames are all on disk already
    disk_plans: Mapping[str, DiskPlan]  # what to keep on disk, by video
    pending: Mapping[str, Sequence[ClipUse]]  # the clips not on disk, by video (columns)
    urgency: UrgencyEntries  # the jobs of `pending`
    to_prune: bool = False  # disk_plans keep the soonest clips until pruning decides
