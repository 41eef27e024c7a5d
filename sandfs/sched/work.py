"""What worker threads do: pure functions of a frozen job record (and the shared materializer,
store and stats) that return a frozen result. Nothing here touches the scheduler's state."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Container, Generator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from sandfs.cache import ObjectStore
from sandfs.faults import fault_point
from sandfs.materialize import (
    Augmenter,
    FrameKey,
    Materializer,
    as_thwc,
    clip_frame_keys,
    first_ops,
    to_layout,
)
from sandfs.media.decode import converted
from sandfs.ops import isolated
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.uses import selected
from sandfs.plan.window import (
    ClipUse,
    VideoWork,
    ViewKey,
    WindowPlan,
    plan_window,
    stop_if_asked,
)
from sandfs.plan.windowvideos import WindowVideos
from sandfs.runtime import collector_paused, settle_collector
from sandfs.sched.jobs import (
    AssemblyJob,
    Failed,
    JobResult,
    Placed,
    PlannedWindow,
    VideoJob,
    VideoJobKey,
)
from sandfs.sched.objects import (
    FramePack,
    Spot,
    clip_object_key,
    frame_object_key,
    frame_packs,
    leaf_rows,
    making_order,
    needs_pruning,
    soonest_clips,
)
from sandfs.sched.pending import PendingColumns
from sandfs.sched.urgency import urgency_entries
from sandfs.stats import Stats

log = logging.getLogger(__name__)

VIDEOS_PER_STOP_CHECK = 1024  # videos whose clips are looked up on disk between two stop checks
BACKGROUND_NICE = 5  # added to worker threads' nice: they yield to FUSE and trainers on a busy CPU

_thread_state = threading.local()


@dataclass(frozen=True, slots=True)
class Tools:
    """What every job uses: shared, thread-safe."""

    materializer: Materializer
    store: ObjectStore | None
    stats: Stats


def yield_to_readers() -> None:
    """Run this worker thread at a lower CPU priority than the thread serving FUSE and than
    the trainers: a ready batch is handed over at once even while jobs run. Linux keeps a nice
    value per thread; where it cannot be set, nothing changes."""
    if getattr(_thread_state, "niced", False):
        return
    _thread_state.niced = True
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):
        nice = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, nice + BACKGROUND_NICE))


# -- planning -------------------------------------------------------------------------------


def plan_active_window(plans: list[TaskPlan], window: int, store: ObjectStore | None,
                       prune_mode: str, *, lead: Container[str] | None = None,
                       skip: Container[str] = frozenset(),
                       resolved: Mapping[ViewKey, ViewPlan] = MappingProxyType({}),
                       settle: bool = False) -> PlannedWindow:
    """The window's plan (or its lead part or rest: `plan_window`), what is on disk already,
    what to keep there, and its clips to make as the board takes them. Parts are not pruned:
    their window is, once whole. `settle`: freeze what it made out of the collector's walks
    before the collector is on again (`runtime.settle_collector`): made while it was paused,
    the window's objects are all in its youngest generation, and the next collection, on
    whichever thread allocates next, walked them all (1.3-1.9 s at 100,000 videos)."""
    plan = plan_window(plans, window, lead=lead, skip=skip, resolved=resolved)
    with collector_paused():  # what it makes lives as long as the window
        planned = _disk_half(plan, store, prune_mode, whole=lead is None and not skip)
        if settle:
            settle_collector()
        return planned


def _disk_half(plan: WindowPlan, store: ObjectStore | None, prune_mode: str, *,
               whole: bool) -> PlannedWindow:
    """`plan_active_window` once the window is planned: what of it is on disk, what to keep
    there, and the jobs of the clips to make."""
    on_disk: dict[ViewKey, set[int]] = {}
    frames_on_disk = set()
    videos = plan.videos
    columns = isinstance(videos, WindowVideos) and videos.unchanged
    taken = bytearray(len(videos.columns.batch)) if columns else None  # type: ignore[union-attr]
    loose: dict[str, Sequence[ClipUse]] = {}  # the board's, where the videos are not columns
    # an empty store (a cold mount) holds none of them, and each key costs a digest
    if store is not None and store.object_count():
        first = 0
        for count, (path, work) in enumerate(videos.items()):
            if count % VIDEOS_PER_STOP_CHECK == 0:
                stop_if_asked()  # a digest a clip: 250,000 videos take seconds
            missing = []
            for use in work.uses:
                found = clip_object_key(use, work.info) in store
                if found:
                    on_disk.setdefault(use.view, set()).add(use.slot)
                missing.append(not found)
            if taken is not None:  # its uses are the next in the columns
                taken[first:first + len(missing)] = bytes(not m for m in missing)
                first += len(missing)
            else:  # its columns' selection, not a tuple of records made again
                loose[path] = work.uses if all(missing) else selected(work.uses, missing)
            if (all(p.object_key(work.info) in store for p in window_packs(work))
                    or all(frame_object_key(work.info, k) in store for k in work.frame_keys)):
                frames_on_disk.add(path)
    else:
        loose = {} if columns else {path: work.uses for path, work in videos.items()}
    pending: Mapping[str, Sequence[ClipUse]] = loose if taken is None else PendingColumns(
        videos, taken if any(taken) else None)  # type: ignore[arg-type]
    kept, to_prune = {}, False
    if store is not None:  # pruning is left for later (WindowPlanner._prune): it takes long
        rows = leaf_rows(plan)
        to_prune = whole and needs_pruning(plan, store.budget_bytes, prune_mode, rows.total)
        kept = soonest_clips(plan, store.budget_bytes, rows)  # all pruning keeps if clips fit
        del rows  # not held beside what urgency_entries makes (8 MB at 100,000 videos)
    entries = urgency_entries(plan.window, pending)
    return PlannedWindow(plan, {k: frozenset(s) for k, s in on_disk.items()},
                         frozenset(frames_on_disk), kept, pending, entries, to_prune)


def plan_task_part(plan: TaskPlan, window: int, store: ObjectStore | None,
                   known: Container[ViewKey] = frozenset(),
                   lead: Container[str] | None = None, skip: Container[str] = frozenset(),
                   resolved: Mapping[ViewKey, ViewPlan] = MappingProxyType({}),
                   ) -> tuple[WindowPlan, frozenset[Spot]]:
    """A joining task's part of an active window (or its lead part, or the rest: as
    `plan_window`'s), and which of its clips are on disk. Views `known` to the window already
    (a search's trials share theirs) need no clips planned."""
    part = plan_window([plan], window, known, lead=lead, skip=skip, resolved=resolved)
    on_disk = frozenset()
    if store is not None:
        on_disk = frozenset(Spot.of(u) for work in part.videos.values() for u in work.uses
                            if clip_object_key(u, work.info) in store)
    return part, on_disk


def release_clips(store: ObjectStore,
                  released: Mapping[ViewKey, tuple[TaskPlan, int, int]]) -> None:
    """Delete the clips of released views from disk."""
    for key, (plan, epoch, iteration) in released.items():
        for slot, clip in enumerate(plan.view_plan(epoch, iteration).clips):
            use = ClipUse(key, slot, clip, ())
            store.discard(clip_object_key(use, plan.videos[clip.video_index]))


# -- jobs -----------------------------------------------------------------------------------


def video_steps(tools: Tools, job: VideoJob, targets: Mapping[ViewKey, np.ndarray],
                report: Callable[[JobResult], None],
                ) -> Generator[None, None, JobResult]:
    """One decode pass (or frames from disk), every clip once, into memory and to disk. A clip
    is made as soon as the pass has decoded its frames, and `report` hands over
    each group of clips made as it is made, so a batch can be served before the pass ends;
    after each group, while clips remain, it yields (a point to pause at: `JobSteps`), and it
    returns what was not reported. Paused, it holds its decoder and frames; any thread may
    resume it, one at a time."""
    info = job.work.info
    fault_point("decode", readers(job.uses))
    # the window's frames as the pass starts: a task joining meanwhile adds its clips to the
    # window's video, and the pass did not decode their frames
    window_frames = job.frames
    maker = _ClipMaker(tools, job, targets, report)
    saved, carried = [], {}
    with isolated.one_pass():
        frames = _frames_from_disk(tools, job) if job.frames_on_disk else None
        if frames is None:
            frames = yield from maker.make_while_decoding()
            if job.save_frames and _save_frames(tools.store, info,
                                                {k: frames[k] for k in window_frames}):
                saved.append(job.key)
            carried = {later: {k: frames[k] for k in c.keys} for later, c in job.carry.items()}
        else:  # every frame at hand: clip by clip, the soonest needed first (admission order)
            for position in range(len(job.uses)):
                if position:
                    yield
                maker.make(position, frames)
    rest = maker.take()
    return JobResult(rest.placed, tuple(saved), carried, rest.failed)


class JobSteps:
    """A job's steps (`video_steps`) and the context they run in: what the pass keeps in
    context variables (the isolated steps it lost) follows it when it resumes in another
    worker thread after a pause."""

    def __init__(self, steps: Generator[None, None, JobResult]) -> None:
        self.steps = steps
        self.context = contextvars.copy_context()

    def run(self, pause: Callable[[], bool]) -> JobResult | None:
        """Run the steps in this thread until the job ends (its result) or `pause()` says
        another job should have this worker (None: call again to resume)."""
        yield_to_readers()
        try:
            while True:
                self.context.run(next, self.steps)
                if pause():
                    return None
        except StopIteration as end:
            return end.value


class _ClipMaker:
    """A video job's clips, made one by one: augmented, laid out, put in their batches'
    buffers and on disk; each reported as it is made."""

    def __init__(self, tools: Tools, job: VideoJob, targets: Mapping[ViewKey, np.ndarray],
                 report: Callable[[JobResult], None]) -> None:
        self.tools, self.job, self.targets, self.report = tools, job, targets, report
        self.augmenter = tools.materializer.augmenter([u.clip for u in job.uses],
                                                      [len(u.readers) for u in job.uses])
        self.placed: list[Placed] = []
        self.failed: list[Failed] = []
        # a frame no clip still to make needs, and that is neither kept nor carried, is let go
        # at once: its memory takes the next frames' (fresh pages cost this VM ~1.5 µs each)
        self.uses_left = Counter(key for use in job.uses for key in clip_frame_keys(use.clip))
        self.kept = set(job.frames if job.save_frames else ()).union(
            *(c.keys for c in job.carry.values()))

    def make_while_decoding(self) -> Generator[None, None, dict[FrameKey, object]]:
        """Decode the pass, making the clips in `making_order`, each as soon as its frames are
        in and those before it are made, and handed over on its own; yielding after each but
        the last (a point to pause at); the frames kept or carried. The soonest batch's
        clip at the end of a video does not wait for the clips of later epochs the decoder
        passed on the way, nor for their making; those are made after it, then each as its
        frames come, so their frames are let go early (Admission charges the pass its peak:
        `pass_frame_bytes`)."""
        job = self.job
        order = making_order(job.uses)
        lasts = [max(job.uses[p].clip.frame_indices) for p in order]
        frames: dict[FrameKey, object] = {}
        made = 0
        for index, keyed in self.tools.materializer.decode_each(job.work.info, job.decode_keys):
            frames.update(keyed)
            ready = made
            while ready < len(order) and lasts[ready] <= index:
                ready += 1
            if ready > made:
                for position in order[made:ready]:  # each handed over as it is made
                    self.make(position, frames)
                    if position != order[-1]:  # more to make: a point to pause at
                        yield
                made = ready
        for count, position in enumerate(order[made:]):  # one by one: it may still pause
            if count:
                yield
            self.make(position, frames)
        return converted(frames, list(frames))  # to keep or carry

    def make(self, position: int, frames: dict[FrameKey, object]) -> None:
        """The clip at `position`: its frames converted to RGB (in `frames`), augmented, laid
        out, put in its batch's buffer and on disk, and handed over. A pass converts a frame
        when a clip needs it, not as it decodes it: the clip a reader waits for is not held up
        by converting frames only later clips (or windows) use."""
        job, store = self.job, self.tools.store
        use = job.uses[position]
        keys = clip_frame_keys(use.clip)
        converted(frames, keys)
        spot = Spot.of(use)
        slot = self.targets[use.view][use.slot] if spot in job.to_memory else None
        outs = {} if slot is None else {position: as_thwc(slot, job.layouts[use.view])}
        try:
            fault_point("augment", readers([use]))
        except Exception as exc:  # as a failing step: this clip's batch alone
            clip: np.ndarray | str = f"{type(exc).__name__}: {exc}"
        else:
            [clip] = augment_each(self.augmenter, [position], frames, outs)
        if isinstance(clip, str):
            self.failed.append(Failed(use, clip))
        else:
            array = to_layout(clip, job.layouts[use.view])
            if slot is not None and clip is not outs[position]:
                slot[...] = array  # made elsewhere: a shape the slot does not have
            stored = spot in job.to_disk and store.put(
                clip_object_key(use, job.work.info), array, deadline=job.deadlines[use.view])
            if stored and spot in job.ahead:
                self.tools.stats.add("clips_made_ahead")
            self.placed.append(Placed(use, slot is not None, bool(stored)))
        self.release(keys, frames)
        self.report(self.take())

    def release(self, keys: set[FrameKey], frames: dict[FrameKey, object]) -> None:
        """A clip of these frames was made: drop those nothing needs any more."""
        self.uses_left.subtract(keys)
        for key in keys - self.kept:
            if not self.uses_left[key]:
                frames.pop(key, None)

    def take(self) -> JobResult:
        """The clips made and not handed over yet."""
        taken = JobResult(tuple(self.placed), failed=tuple(self.failed))
        self.placed, self.failed = [], []
        return taken


def readers(uses: Sequence[ClipUse]) -> set[str]:
    """The tasks that read these clips (whose work a fault point is reached for)."""
    return {task for use in uses for task, _ in use.readers}


def augment_each(augmenter: Augmenter, positions: Sequence[int],
                 frames: Mapping[FrameKey, object],
                 outs: Mapping[int, np.ndarray] | None = None) -> list[np.ndarray | str]:
    """Each clip through its steps, or why a step failed on it (a str): a failing step (a
    custom one that raises, or one out of process that crashes or hangs) fails only the clips
    that need it, whichever tasks share the pass. The augmenter stops at a failure, and the
    clips after it go through from there."""
    out: list[np.ndarray | str] = []
    while len(out) < len(positions):
        rest = positions[len(out):]
        try:
            out.extend(augmenter.run(rest, frames, outs))
        except Exception as exc:
            if len(out) == len(positions):
                raise  # after the last clip: not a step's failure
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def window_packs(work: VideoWork) -> list[FramePack]:
    """How a video's frames for one window are kept when a pass carries them there."""
    return frame_packs(work.frame_keys, first_ops(u.clip for u in work.uses))


def save_carried(tools: Tools, job: VideoJob,
                 carried: Mapping[int, Mapping[FrameKey, np.ndarray]]) -> list[VideoJobKey]:
    """Keep frames decoded for later windows on disk, a few packs per window (`FramePack`); a
    failure only means that those windows decode for themselves (the batches of this job are
    out already)."""
    yield_to_readers()
    saved = []
    info = job.work.info
    for later, frames in carried.items():
        carry = job.carry[later]
        try:
            ok = all([tools.store.put(pack.object_key(info), pack.stack(frames),
                                      deadline=carry.deadline)
                      for pack in frame_packs(frames, carry.firsts)])
        except Exception as exc:
            log.warning("keeping frames of %s for window %d failed: %s: %s",
                        info.rel_path, later, type(exc).__name__, exc)
            ok = False
        if ok:
            saved.append(VideoJobKey(later, info.path))
            tools.stats.add("frames_carried", len(frames))
    return saved


def _frames_from_disk(tools: Tools, job: VideoJob) -> dict[FrameKey, object] | None:
    """The job's frames from disk: from the packs a pass carried them in (after the first op
    of all the window's clips that use them: `Prefixed`), or as pruning kept them (one object
    a frame, as decoded); None when one is missing."""
    frames = _frames_from_packs(tools.store, job)
    if frames is None:
        frames = _frames_kept_one_by_one(tools.store, job)
    if frames is None:
        tools.store.note_recomputed()
        return None
    tools.stats.add("frames_from_disk", len(frames))
    return frames


def _frames_from_packs(store: ObjectStore, job: VideoJob) -> dict[FrameKey, object] | None:
    """Read packs are marked done: carried for one window, they are the first to evict once
    it has them (left with their past deadlines, they were the last)."""
    wanted, frames, read = job.frames, {}, []
    for pack in window_packs(job.work):
        if wanted.isdisjoint(pack.frame_keys):
            continue
        key = pack.object_key(job.work.info)
        array = store.get(key, mapped=True)  # frames are read, never written: no copy
        found = None if array is None else pack.unstack(array)
        if found is None:
            return None
        frames.update((k, f) for k, f in found.items() if k in wanted)
        read.append(key)
    if len(frames) < len(wanted):
        return None
    for key in read:
        store.mark_done(key)
    return frames


def _frames_kept_one_by_one(store: ObjectStore, job: VideoJob) -> dict[FrameKey, object] | None:
    frames = {}
    for key in job.frames:
        array = store.get(frame_object_key(job.work.info, key))
        if array is None:
            return None
        frames[key] = array
    return frames


def _save_frames(store: ObjectStore, info, frames: Mapping[FrameKey, np.ndarray]) -> bool:
    """True when every frame is on disk afterwards."""
    return all([store.put(frame_object_key(info, k), f) for k, f in frames.items()])


def assemble(tools: Tools, job: AssemblyJob, targets: Mapping[ViewKey, np.ndarray]) -> JobResult:
    """Read a batch's clips back from disk; a missing or corrupt one is recomputed."""
    array = targets[job.key]
    placed = []
    for slot in job.slots:
        clip = job.view.clips[slot]
        use = ClipUse(job.key, slot, clip, ())
        target = array[slot]
        stored = tools.store.get(clip_object_key(use, job.plan.videos[clip.video_index]),
                                 out=target)
        if stored is None:
            tools.store.note_recomputed()
            stored = _recompute_clip(tools, job.plan, clip)
        if stored is not target:
            target[...] = stored
        placed.append(Placed(use, True, True))
    return JobResult(tuple(placed))


def _recompute_clip(tools: Tools, plan: TaskPlan, clip) -> np.ndarray:
    info = plan.videos[clip.video_index]
    frames = tools.materializer.decode(info, clip_frame_keys(clip))
    out = next(iter(tools.materializer.augment_clips([clip], frames)))
    tools.stats.add("clips_recomputed")
    return to_layout(out, plan.sampling.layout)
