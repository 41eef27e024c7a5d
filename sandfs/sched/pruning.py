"""What a window keeps on disk: Algorithm 1 (`sandfs.cache.flatprune`) over the window's objects
as columns (video -> frames -> clips, the cost model of `objects.object_graph`), read from the
window's clip tables and uses as columns (a clip's row, frame list and source by index, in
numpy); the general walk builds `object_graph` only for the videos whose collapses might save
space."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sandfs.cache.flatprune import FlatGraphs, gather, prune_flat
from sandfs.plan.cliptable import TableClips, distinct
from sandfs.plan.uses import ColumnUses, distinct_rows, frame_rows
from sandfs.plan.window import VideoWork, WindowPlan
from sandfs.runtime import collector_paused
from sandfs.sched.objects import (
    AUGMENT_SECONDS_PER_MPIXEL,
    DECODE_SECONDS_PER_MPIXEL,
    KeptWindow,
    frame_nbytes,
    kept_window,
    leaf_rows,
    needs_pruning,
    object_graph,
    out_frame_nbytes,
    prune_room,
    soonest_clips,
)

log = logging.getLogger(__name__)


def disk_plans(plan: WindowPlan, budget_bytes: int, mode: str) -> KeptWindow:
    """What to keep on disk for each video of the window, within `budget_bytes`."""
    rows = leaf_rows(plan)  # read once: whether to prune, and the soonest clips
    if needs_pruning(plan, budget_bytes, mode, rows.total):
        return pruned_plans(plan, prune_room(budget_bytes))
    return soonest_clips(plan, budget_bytes, rows)


def window_pruned(plan: WindowPlan, budget_bytes: int, unless_fits: str | None,
                  wait_turn: Callable[[], object] = lambda: None) -> KeptWindow | None:
    """In a thread: Algorithm 1 over a snapshot of the window (`WindowPlanner._prune`); with
    `unless_fits` (the prune mode), None when it has nothing to do (`needs_pruning`)."""
    wait_turn()
    snapshot = plan.snapshot()
    if unless_fits is not None and not needs_pruning(snapshot, budget_bytes, unless_fits):
        return None
    return pruned_plans(snapshot, prune_room(budget_bytes), wait_turn)


def pruned_plans(plan: WindowPlan, room: int,
                 wait_turn: Callable[[], object] = lambda: None) -> KeptWindow:
    """Algorithm 1 over the window's objects, within `room` bytes; it calls `wait_turn` before
    each chunk of videos is read and between the walk's passes (the planner holds it back
    while it plans)."""
    started = time.monotonic()
    with collector_paused():  # its objects live until it returns (100,000 videos: 2x faster)
        # walked once, not each path looked up (a window's videos are made when looked up)
        paths, works = [], []
        for path, work in plan.videos.items():
            paths.append(path)
            works.append(work)
        return _pruned_plans(plan, paths, works, room, wait_turn, started)


def _pruned_plans(plan: WindowPlan, paths: list[str], works: list[VideoWork], room: int,
                  wait_turn: Callable[[], object], started: float) -> KeptWindow:
    clips = window_clips(plan, paths, wait_turn, works)
    chosen = prune_flat(clips.graphs, room,
                        lambda v: object_graph(works[v], plan), wait_turn)
    log.info("window %d: keeping %d bytes on disk (%d collapses, %d drops, +%.1fs "
             "recompute) in %.2fs", plan.window, chosen.total_nbytes, chosen.collapses,
             chosen.drops, chosen.added_recompute_seconds, time.monotonic() - started)
    return _kept_plans(paths, works, clips, chosen.clips_kept, chosen.frames_kept)


def _kept_plans(paths: list[str], works: list[VideoWork], clips: WindowClips,
                clips_kept: np.ndarray, frames_kept: np.ndarray) -> KeptWindow:
    """Each video's kept clips as bits over its uses, no row for a video that keeps nothing."""
    video = clips.graphs.clip_video
    kept = np.flatnonzero(clips_kept)
    first_use = np.searchsorted(video, np.arange(len(paths)))  # clips go video by video
    return kept_window(paths, [work.uses for work in works], video[kept],
                       kept - first_use[video[kept]], frames_kept)


@dataclass(frozen=True, slots=True)
class WindowClips:
    """A window's clips as pruning reads them: their graphs, and where each clip goes (its
    batch, an index into `views`, and its slot there)."""

    graphs: FlatGraphs
    views: list
    view: np.ndarray  # int64 [C]
    slot: np.ndarray  # int64 [C]


@dataclass(frozen=True, slots=True)
class UseRows:
    """A window's uses as columns, a row each, grouped by video in the order of its uses."""

    video: np.ndarray
    views: list
    view: np.ndarray
    slot: np.ndarray
    source: np.ndarray  # an index into `sources`
    sources: list  # the distinct sources
    frame_nbytes: np.ndarray  # one frame's, decoded
    out_nbytes: np.ndarray  # the clip's
    lengths: np.ndarray  # frame indices a clip
    indices: np.ndarray  # the clips' frame indices, concatenated


def window_clips(plan: WindowPlan, paths: list[str],
                 wait_turn: Callable[[], object] = lambda: None,
                 works: list[VideoWork] | None = None) -> WindowClips:
    """The objects of the videos `paths` of the window (`works`: those videos, when found
    already), as columns. A clip's frames are its distinct (index, source) pairs, as in
    `clip_frame_keys`. Where the uses are columns over clip tables, they are read by index in
    numpy (`table_rows`), else one use at a time."""
    works = [plan.videos[path] for path in paths] if works is None else works
    rows = table_rows(plan, works, wait_turn) if all(
        isinstance(work.uses, ColumnUses) for work in works) else None
    if rows is None:
        rows = use_rows(plan, works, wait_turn)
    return WindowClips(flat_graphs(rows, works), rows.views, rows.view, rows.slot)


_CHUNK = 4096  # videos read between two `wait_turn`s


def table_rows(plan: WindowPlan, works: list[VideoWork],
               wait_turn: Callable[[], object]) -> UseRows | None:
    """The uses read as columns: each use's batch and slot, its clip's table row there, and
    the row's frame list and path by index; None where a batch's clips are not a table's."""
    batch_rows, slots, counts = [], [], []
    for chunk in range(0, len(works), _CHUNK):
        wait_turn()
        columns = chunk_columns(works[chunk:chunk + _CHUNK])
        counts.extend(len(rows) for rows, _ in columns)
        batch_rows.extend(rows for rows, _ in columns)
        slots.extend(itertools.chain.from_iterable(slot for _, slot in columns))
    batches, batch_of = distinct_rows(batch_rows)  # a row a batch, not a use
    if any(type(row.clips) is not TableClips for row in batches):
        return None
    wait_turn()
    batch = np.frombuffer(batch_of, np.int32).astype(np.int64)
    slot = np.array(slots, np.int64)
    tables, table_of = distinct([row.clips.table for row in batches])
    starts = np.array([row.clips.start for row in batches], np.int64)
    base = np.cumsum([0] + [len(table) for table in tables])[np.frombuffer(table_of, np.int32)]
    table_row = (base + starts)[batch] + slot
    frame_list = _stacked([table.frames for table in tables], [table._frames for table in tables])
    path = _stacked([table.path for table in tables], [table._paths for table in tables])
    numbers: dict[tuple | None, int] = {}
    source = np.array([numbers.setdefault(p.source, len(numbers))
                       for table in tables for p in table._paths], np.int64)[path[table_row]]
    lists = list(itertools.chain.from_iterable(table._frames for table in tables))
    list_lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    flat = np.fromiter(itertools.chain.from_iterable(lists), np.int64, int(list_lengths.sum()))
    which = frame_list[table_row]
    lengths = list_lengths[which]
    indices = gather(flat, np.concatenate(([0], np.cumsum(list_lengths))), which)
    video = np.repeat(np.arange(len(works)), counts)
    per_frame = _out_frame_nbytes(plan, [row.view for row in batches])
    return UseRows(video, [row.view for row in batches], batch, slot, source, list(numbers),
                 _frame_nbytes(works, video, source, list(numbers)),
                 per_frame[batch] * lengths, lengths, indices)


def chunk_columns(works: list[VideoWork]) -> list:
    """A chunk of videos' uses, as their columns."""
    return [work.uses.columns for work in works]


def _stacked(columns: Sequence, distinct: Sequence[Sequence]) -> np.ndarray:
    """Tables' index columns as one, each table's indices past those of the tables before."""
    base = np.cumsum([0] + [len(d) for d in distinct])
    return np.concatenate([np.asarray(column).astype(np.int64) + offset  # an array's type
                           for column, offset in zip(columns, base.tolist(), strict=False)]
                          or [np.zeros(0, np.int64)])


def _out_frame_nbytes(plan: WindowPlan, views: list) -> np.ndarray:
    """One output frame's bytes, per batch: once a view."""
    sizes: dict[object, int] = {}
    for view in views:
        if view not in sizes:
            sizes[view] = out_frame_nbytes(plan.views[view][0])
    return np.array([sizes[view] for view in views], np.int64)


def _frame_nbytes(works: list[VideoWork], video: np.ndarray, source: np.ndarray,
                  sources: list) -> np.ndarray:
    """A decoded frame's bytes, per use: they depend on the video and source only."""
    pair = video * max(1, len(sources)) + source
    distinct, inverse = np.unique(pair, return_inverse=True)
    nbytes = [frame_nbytes(works[p // len(sources)].info, (0, sources[p % len(sources)]))
              for p in distinct.tolist()]
    return np.array(nbytes, np.int64)[inverse] if nbytes else np.zeros(0, np.int64)


def use_rows(plan: WindowPlan, works: list[VideoWork],
             wait_turn: Callable[[], object] = lambda: None) -> UseRows:
    """The uses read one at a time (`frame_rows`): any uses, the reference for
    `table_rows`."""
    video, view, slots, lengths, indices, source = [], [], [], [], [], []
    views: dict[object, int] = {}
    numbers: dict[tuple | None, int] = {}
    for index, work in enumerate(works):
        wait_turn()
        for batch, slot, frames, clip_source in frame_rows(work.uses):  # no records made
            video.append(index)
            view.append(views.setdefault(batch, len(views)))
            slots.append(slot)
            lengths.append(len(frames))
            indices.extend(frames)
            source.append(numbers.setdefault(clip_source, len(numbers)))
    named = list(views)
    video_, view_, source_, lengths_ = (np.array(c, np.int64)
                                        for c in (video, view, source, lengths))
    return UseRows(video_, named, view_, np.array(slots, np.int64), source_, list(numbers),
                 _frame_nbytes(works, video_, source_, list(numbers)),
                 _out_frame_nbytes(plan, named)[view_] * lengths_, lengths_,
                 np.array(indices, np.int64))


def flat_graphs(rows: UseRows, works: list[VideoWork]) -> FlatGraphs:
    """The rows as flat graphs: frames numbered in numpy, per (video, source, index)."""
    count = len(rows.video)
    indices, video = rows.indices, rows.video
    clip_of = np.repeat(np.arange(count), rows.lengths)
    span = int(indices.max(initial=0)) + 1
    key = ((video * max(1, len(rows.sources)) + rows.source)[clip_of] * span
           + indices)  # one number per (video, source, index): a frame
    rising = (np.diff(key) > 0) | (clip_of[1:] != clip_of[:-1])
    if not rising.all():  # a clip repeats or reorders frames: keep each distinct frame once
        order = np.lexsort((key, clip_of))
        clip_of, key = clip_of[order], key[order]
        first = np.r_[True, (clip_of[1:] != clip_of[:-1]) | (key[1:] != key[:-1])]
        clip_of, key = clip_of[first], key[first]
    width = max(1, len(rows.sources)) * span  # a video's keys
    distinct, frame_ids = _numbered(key, width)
    frame_bytes = np.zeros(len(distinct), np.int64)
    frame_bytes[frame_ids] = rows.frame_nbytes[clip_of]
    per_clip = np.bincount(clip_of, minlength=count)
    frame_seconds, shares = _video_seconds(
        works, distinct // span // max(1, len(rows.sources)) * span + distinct % span, span)
    return FlatGraphs(video, rows.out_nbytes, shares[video] * per_clip,
                      np.concatenate(([0], np.cumsum(per_clip))).astype(np.int64),
                      frame_ids.astype(np.int64), frame_bytes, frame_seconds)


_DENSE = 1 << 22  # keys numbered at once by a mark each


def _numbered(key: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(key, return_inverse=True)` without its sort: the keys come video by video,
    each video's in its own `width` keys, so a block of videos is numbered by marking its
    keys and counting the marks."""
    if not len(key) or width > _DENSE:
        return np.unique(key, return_inverse=True)
    video = key // width
    block = _DENSE // width
    ends = np.searchsorted(video, np.arange(0, int(video[-1]) + block + 1, block)).tolist()
    numbers, found, base = np.empty(len(key), np.int64), [], 0
    for first, last in itertools.pairwise(ends):
        if first == last:
            continue
        origin = int(video[first]) * width
        marked = np.zeros(int(video[last - 1] + 1) * width - origin, bool)
        marked[key[first:last] - origin] = True
        numbers[first:last] = np.cumsum(marked)[key[first:last] - origin] + (base - 1)
        found.append(np.flatnonzero(marked) + origin)
        base += len(found[-1])
    return np.concatenate(found), numbers


def _video_seconds(works: list[VideoWork], frames: np.ndarray,
                   span: int) -> tuple[np.ndarray, np.ndarray]:
    """Each video's `video_seconds`, from its frames (video * span + index, one per source):
    the same float operations, a video per row."""
    if np.any(frames[1:] <= frames[:-1]):  # a video's frames from two sources
        frames = np.sort(frames)  # not np.unique: its hash table took seconds on 10^6
        frames = frames[np.r_[True, frames[1:] != frames[:-1]]]
    infos = [work.info for work in works]
    mpixels = np.array([info.width * info.height for info in infos], float) / 1e6
    needed = np.bincount(frames // span, minlength=len(works))
    decodes = _frames_to_decode(infos, frames // span, frames % span)
    return (DECODE_SECONDS_PER_MPIXEL * mpixels * decodes / np.maximum(1, needed),
            AUGMENT_SECONDS_PER_MPIXEL * mpixels)


def _frames_to_decode(infos: list, video: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`frames_to_decode` of each video, from its sorted distinct frames: a run starts at a
    frame's keyframe (`keyframe_at_or_before`) unless that is at most one past the frame
    before, and decodes from there to its last frame."""
    count = len(infos)
    num_frames = np.array([info.num_frames for info in infos], np.int64)
    if len(index) and (index.min() < 0 or np.any(index >= num_frames[video])):
        bad = int(np.flatnonzero((index < 0) | (index >= num_frames[video]))[0])
        info = infos[int(video[bad])]
        raise ValueError(f"frame index {int(index[bad])} out of range [0, {info.num_frames})"
                         f" of {info.name!r}")
    keys = [info.keyframe_indices if info.seekable else () for info in infos]
    lengths = np.fromiter(map(len, keys), np.int64, count)
    keyframes = np.fromiter(itertools.chain.from_iterable(keys), np.int64, int(lengths.sum()))
    width = int(max(num_frames.max(initial=0), keyframes.max(initial=0))) + 1
    owner = np.repeat(np.arange(count), lengths)
    at = np.searchsorted(owner * width + keyframes, video * width + index, "right") - 1
    mine = (at >= 0) & (owner[np.maximum(at, 0)] == video) if len(owner) else at >= 0
    start = np.where(mine, keyframes[np.maximum(at, 0)] if len(owner) else 0, 0)
    new = np.r_[True, (video[1:] != video[:-1]) | (start[1:] > index[:-1] + 1)]
    last = np.r_[new[1:], True]  # a run's last frame: the one before the next run
    decoded = index[last] - start[new] + 1
    return np.bincount(video[new], weights=decoded, minlength=count)
