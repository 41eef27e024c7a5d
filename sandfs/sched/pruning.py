"""What a window keeps on disk: Algorithm 1 (`sandfs.cache.flatprune`) over the window's objects
as columns (video -> frames -> clips, the cost model of `objects.object_graph`), read from the
window one video at a time; the general walk builds `object_graph` only for the videos whose
collapses might save space."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import numpy as np

from sandfs.cache.flatprune import FlatGraphs, prune_flat
from sandfs.plan.uses import frame_rows
from sandfs.plan.window import VideoWork, WindowPlan
from sandfs.runtime import collector_paused
from sandfs.sched.objects import (
    NO_CLIPS,
    DiskPlan,
    Spot,
    frame_nbytes,
    needs_pruning,
    object_graph,
    out_frame_nbytes,
    prune_room,
    soonest_clips,
    video_seconds,
)

log = logging.getLogger(__name__)


def disk_plans(plan: WindowPlan, budget_bytes: int, mode: str) -> dict[str, DiskPlan]:
    """What to keep on disk for each video of the window, within `budget_bytes`."""
    if needs_pruning(plan, budget_bytes, mode):
        return pruned_plans(plan, prune_room(budget_bytes))
    return soonest_clips(plan, budget_bytes)


def window_pruned(plan: WindowPlan, budget_bytes: int, unless_fits: str | None,
                  wait_turn: Callable[[], object] = lambda: None) -> dict[str, DiskPlan] | None:
    """In a thread: Algorithm 1 over a snapshot of the window (`WindowPlanner._prune`); with
    `unless_fits` (the prune mode), None when it has nothing to do (`needs_pruning`)."""
    wait_turn()
    snapshot = plan.snapshot()
    if unless_fits is not None and not needs_pruning(snapshot, budget_bytes, unless_fits):
        return None
    return pruned_plans(snapshot, prune_room(budget_bytes), wait_turn)


def pruned_plans(plan: WindowPlan, room: int,
                 wait_turn: Callable[[], object] = lambda: None) -> dict[str, DiskPlan]:
    """Algorithm 1 over the window's objects, within `room` bytes; it calls `wait_turn` before
    each video is read and between the walk's passes (the planner holds it back while it
    plans)."""
    started = time.monotonic()
    paths = list(plan.videos)
    with collector_paused():  # its objects live until it returns (100,000 videos: 2x faster)
        return _pruned_plans(plan, paths, room, wait_turn, started)


def _pruned_plans(plan: WindowPlan, paths: list[str], room: int,
                  wait_turn: Callable[[], object], started: float) -> dict[str, DiskPlan]:
    graphs = window_graphs(plan, paths, wait_turn)
    chosen = prune_flat(graphs, room, lambda v: object_graph(plan.videos[paths[v]], plan),
                        wait_turn)
    log.info("window %d: keeping %d bytes on disk (%d collapses, %d drops, +%.1fs "
             "recompute) in %.2fs", plan.window, chosen.total_nbytes, chosen.collapses,
             chosen.drops, chosen.added_recompute_seconds, time.monotonic() - started)
    kept, frames_kept = chosen.clips_kept.tolist(), chosen.frames_kept.tolist()
    plans, first = {}, 0
    for index, path in enumerate(paths):
        uses = plan.videos[path].uses
        spots = {Spot(view, slot) for (view, slot, _, _), keep in zip(
            frame_rows(uses), kept[first:first + len(uses)], strict=True) if keep}
        if spots or frames_kept[index]:  # none for a video that keeps nothing
            plans[path] = DiskPlan(spots or NO_CLIPS, frames_kept[index])
        first += len(uses)
    return plans


def window_graphs(plan: WindowPlan, paths: list[str],
                  wait_turn: Callable[[], object] = lambda: None) -> FlatGraphs:
    """The objects of the videos `paths` of the window, as columns; `wait_turn` before each
    video is read. A clip's frames are its distinct (index, source) pairs, as in
    `clip_frame_keys`; frames are numbered in numpy, not per frame in Python."""
    clips = _ClipRows()
    frame_seconds, shares = [], []
    for index, path in enumerate(paths):
        wait_turn()
        work = plan.videos[path]
        decode, share = video_seconds(work)
        frame_seconds.append(decode)
        shares.append(share)
        clips.add(plan, index, work)
    return _columns(clips, np.array(frame_seconds), np.array(shares))


class _ClipRows:
    """A window's clips, read one video at a time into plain lists."""

    def __init__(self) -> None:
        self.video: list[int] = []
        self.frame_indices: list[tuple[int, ...]] = []
        self.source: list[int] = []  # a number per distinct source
        self.frame_nbytes: list[int] = []  # one frame's, decoded
        self.out_nbytes: list[int] = []  # the clip's
        self._sources: dict[tuple | None, int] = {}
        self._out_frame: dict[object, int] = {}  # per view: one output frame's bytes

    def add(self, plan: WindowPlan, index: int, work: VideoWork) -> None:
        sizes: dict[tuple | None, int] = {}  # a frame's bytes depend on its source only
        for view, _, frames, source in frame_rows(work.uses):  # no records made
            if source not in sizes:
                sizes[source] = frame_nbytes(work.info, (0, source))
            per_frame = self._out_frame.get(view)
            if per_frame is None:  # once a view
                per_frame = self._out_frame[view] = out_frame_nbytes(plan.views[view][0])
            self.video.append(index)
            self.frame_indices.append(frames)
            self.source.append(self._sources.setdefault(source, len(self._sources)))
            self.frame_nbytes.append(sizes[source])
            self.out_nbytes.append(per_frame * len(frames))


def _columns(clips: _ClipRows, frame_seconds: np.ndarray, shares: np.ndarray) -> FlatGraphs:
    count = len(clips.video)
    lengths = np.fromiter(map(len, clips.frame_indices), np.int64, count)
    indices = np.fromiter(itertools.chain.from_iterable(clips.frame_indices), np.int64,
                          int(lengths.sum()))
    video = np.array(clips.video, np.int64)
    clip_of = np.repeat(np.arange(count), lengths)
    span = int(indices.max(initial=0)) + 1
    key = ((video * max(1, len(clips._sources)) + np.array(clips.source, np.int64))[clip_of]
           * span + indices)  # one number per (video, source, index): a frame
    rising = (np.diff(key) > 0) | (clip_of[1:] != clip_of[:-1])
    if not rising.all():  # a clip repeats or reorders frames: keep each distinct frame once
        order = np.lexsort((key, clip_of))
        clip_of, key = clip_of[order], key[order]
        first = np.r_[True, (clip_of[1:] != clip_of[:-1]) | (key[1:] != key[:-1])]
        clip_of, key = clip_of[first], key[first]
    distinct, frame_ids = np.unique(key, return_inverse=True)
    frame_bytes = np.zeros(len(distinct), np.int64)
    frame_bytes[frame_ids] = np.array(clips.frame_nbytes, np.int64)[clip_of]
    per_clip = np.bincount(clip_of, minlength=count)
    return FlatGraphs(video, np.array(clips.out_nbytes, np.int64),
                      shares[video] * per_clip,
                      np.concatenate(([0], np.cumsum(per_clip))).astype(np.int64),
                      frame_ids.astype(np.int64), frame_bytes, frame_seconds)
