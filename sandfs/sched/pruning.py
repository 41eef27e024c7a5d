"""What a window keeps on disk: Algorithm 1 (`sandfs.cache.flatprune`) over the window's objects
as columns (video -> frames -> clips, the cost model of `objects.object_graph`), read from the
window's clip tables and uses as columns (a clip's row, frame list and source by index, in
numpy); the general walk builds `object_graph` only for the videos whose collapses might save
space. A chunk of videos is read and walked at a time (`prune_chunks`): what stays is each
chunk's drop steps and each video's path, uses and clip count, not the window's graphs (3.0-3.6
GB of a 250,000-video daemon's RSS while it pruned; docs/performance.md#dataset-scale)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence

import numpy as np

from sandfs.cache.flatprune import FlatGraphs, prune_chunks
from sandfs.media.types import VideoInfo
from sandfs.plan.cliptable import TableClips, distinct
from sandfs.plan.uses import ClipUse, ColumnUses, distinct_rows, frame_rows
from sandfs.plan.window import VideoWork, WindowPlan
from sandfs.plan.windowvideos import ColumnRun, ColumnVideo, WindowVideos
from sandfs.runtime import collector_paused
from sandfs.sched.objects import (
    AUGMENT_SECONDS_PER_MPIXEL,
    DECODE_SECONDS_PER_MPIXEL,
    KeptWindow,
    compact_uses,
    joined_uses,
    kept_window,
    leaf_rows,
    needs_pruning,
    object_graph,
    out_frame_nbytes,
    prune_room,
    soonest_clips,
)
from sandfs.sched.pruneread import Chunk, StackedTables, UseRows, WindowReader, use_frame_nbytes

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
    """Algorithm 1 over the window's objects, within `room` bytes, a chunk of videos at a time
    (`prune_chunks`); it calls `wait_turn` before each chunk of videos is read and between the
    walk's passes (the planner holds it back while it plans)."""
    started = time.monotonic()
    with collector_paused():  # its objects live until it returns (100,000 videos: 2x faster)
        videos = _ReadVideos()
        chosen = prune_chunks(videos.chunks(plan, wait_turn), room,
                              lambda v: object_graph(plan.videos[videos.paths[v]], plan),
                              wait_turn)
        log.info("window %d: keeping %d bytes on disk (%d collapses, %d drops, +%.1fs "
                 "recompute) in %.2fs", plan.window, chosen.total_nbytes, chosen.collapses,
                 chosen.drops, chosen.added_recompute_seconds, time.monotonic() - started)
        return videos.kept(chosen.clips_kept, chosen.frames_kept)


_CHUNK = 4096  # videos read between two `wait_turn`s, and pruned together


class _ReadVideos:
    """What pruning holds of a window's videos once their chunk's graphs are let go: each
    one's path, uses (ranges of the window's columns where they are) and clips."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._uses: list[Sequence[Sequence[ClipUse]]] = []  # a chunk's videos'
        self._clips: list[np.ndarray] = []  # a chunk's videos' clips (int32)

    def chunks(self, plan: WindowPlan, wait_turn: Callable[[], object]) -> Iterator[FlatGraphs]:
        """The graphs of the window's videos, `_CHUNK` videos at a time."""
        reader = WindowReader(plan)
        for piece in _pieces(plan.videos):
            wait_turn()
            chunk = chunk_rows(reader, piece)
            rows = chunk.rows
            if rows is None:  # a batch's clips are not a table's: a use at a time
                rows = use_rows(plan, [plan.videos[path] for path in chunk.paths], wait_turn)
            self.paths.extend(chunk.paths)
            self._uses.append(compact_uses(chunk.uses))
            self._clips.append(np.bincount(rows.video, minlength=len(chunk.paths))
                               .astype(np.int32))
            graphs = flat_graphs(rows, chunk.infos)
            del chunk, rows  # not held while the chunk is walked, nor the next one read
            yield graphs
            del graphs

    def kept(self, clips_kept: np.ndarray, frames_kept: np.ndarray) -> KeptWindow:
        """Each video's kept clips as bits over its uses, no row for a video that keeps
        nothing (clips go video by video, a video's in the order of its uses)."""
        counts = np.concatenate(self._clips or [np.zeros(0, np.int32)])
        ends = np.cumsum(counts, dtype=np.int64)
        kept = np.flatnonzero(clips_kept)
        video = np.searchsorted(ends, kept, "right")
        return kept_window(self.paths, joined_uses(self._uses), video,
                           kept - (ends[video] - counts[video]), frames_kept)


def _pieces(videos: MutableMapping[str, VideoWork | ColumnVideo]
            ) -> Iterator[ColumnRun | list[tuple[str, VideoWork | ColumnVideo]]]:
    """The window's videos in `items`' order, up to `_CHUNK` at a time: runs of a chunk's
    columns (`WindowVideos.column_runs`), and the rest (held as records, a dict's) gathered.
    Walked once, not each path looked up (a window's videos are made as they are walked)."""
    walk = videos.column_runs() if isinstance(videos, WindowVideos) else videos.items()
    held: list[tuple[str, VideoWork | ColumnVideo]] = []
    for run in walk:
        if isinstance(run, ColumnRun):
            if held:
                yield held
                held = []
            for start in range(run.start, run.end, _CHUNK):
                end = min(start + _CHUNK, run.end)
                yield run._replace(start=start, end=end,
                                   paths=run.paths[start - run.start:end - run.start])
            continue
        held.append(run)
        if len(held) >= _CHUNK:
            yield held
            held = []
    if held:
        yield held


def chunk_rows(reader: WindowReader,
               piece: ColumnRun | list[tuple[str, VideoWork | ColumnVideo]]) -> Chunk:
    """A chunk of videos read: a run of a chunk's columns in numpy, other videos' uses as
    their columns (`table_rows`) where they are."""
    if isinstance(piece, ColumnRun):
        return reader.run_chunk(piece)
    paths, works = [path for path, _ in piece], [work for _, work in piece]
    rows = table_rows(reader.plan, works, reader.tables) if all(
        isinstance(work.uses, ColumnUses) for work in works) else None
    return Chunk(rows, paths, [work.info for work in works], [work.uses for work in works])


def table_rows(plan: WindowPlan, works: list[VideoWork],
               tables: StackedTables | None = None) -> UseRows | None:
    """The uses read as columns: each use's batch and slot, its clip's table row there, and
    the row's frame list and path by index (`tables`: those read before); None where a
    batch's clips are not a table's."""
    columns = [work.uses.columns for work in works]
    batches, batch_of = distinct_rows([rows for rows, _ in columns])  # a row a batch
    if any(type(row.clips) is not TableClips for row in batches):
        return None
    tables = StackedTables() if tables is None else tables
    batch = np.frombuffer(batch_of, np.int32).astype(np.int64)
    found, table_of = distinct([row.clips.table for row in batches])
    starts = np.array([row.clips.start for row in batches], np.int64)
    row = ((tables.rows(found)[np.frombuffer(table_of, np.int32)] + starts)[batch]
           + np.array(list(itertools.chain.from_iterable(slot for _, slot in columns)),
                      np.int64))
    source = tables.source[row].astype(np.int64)
    lengths, indices = tables.frames(tables.frame_list[row])
    video = np.repeat(np.arange(len(works)), [len(rows) for rows, _ in columns])
    sources, infos = tables.sources, [work.info for work in works]
    return UseRows(video, source, sources, use_frame_nbytes(infos, video, source, sources),
                   _out_frame_nbytes(plan, [row.view for row in batches])[batch] * lengths,
                   lengths, indices)


def _out_frame_nbytes(plan: WindowPlan, views: list) -> np.ndarray:
    """One output frame's bytes, per batch: once a view."""
    sizes: dict[object, int] = {}
    for view in views:
        if view not in sizes:
            sizes[view] = out_frame_nbytes(plan.views[view][0])
    return np.array([sizes[view] for view in views], np.int64)


def use_rows(plan: WindowPlan, works: list[VideoWork],
             wait_turn: Callable[[], object] = lambda: None) -> UseRows:
    """The uses read one at a time (`frame_rows`): any uses, the reference for
    `table_rows` and `WindowReader`."""
    video, view, lengths, indices, source = [], [], [], [], []
    views: dict[object, int] = {}
    numbers: dict[tuple | None, int] = {}
    for index, work in enumerate(works):
        wait_turn()
        for batch, _, frames, clip_source in frame_rows(work.uses):  # no records made
            video.append(index)
            view.append(views.setdefault(batch, len(views)))
            lengths.append(len(frames))
            indices.extend(frames)
            source.append(numbers.setdefault(clip_source, len(numbers)))
    video_, view_, source_, lengths_ = (np.array(c, np.int64)
                                        for c in (video, view, source, lengths))
    return UseRows(video_, source_, list(numbers),
                   use_frame_nbytes([work.info for work in works], video_, source_,
                                    list(numbers)),
                   _out_frame_nbytes(plan, list(views))[view_] * lengths_, lengths_,
                   np.array(indices, np.int64))


def flat_graphs(rows: UseRows, infos: list[VideoInfo]) -> FlatGraphs:
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
        infos, distinct // span // max(1, len(rows.sources)) * span + distinct % span, span)
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
        found.append(np.flatnonzero(marked) + origin)  # sorted: a key's number is its place
        numbers[first:last] = np.searchsorted(found[-1], key[first:last]) + base
        base += len(found[-1])
    return np.concatenate(found), numbers


def _video_seconds(infos: list[VideoInfo], frames: np.ndarray,
                   span: int) -> tuple[np.ndarray, np.ndarray]:
    """Each video's `video_seconds`, from its frames (video * span + index, one per source):
    the same float operations, a video per row."""
    if np.any(frames[1:] <= frames[:-1]):  # a video's frames from two sources
        frames = np.sort(frames)  # not np.unique: its hash table took seconds on 10^6
        frames = frames[np.r_[True, frames[1:] != frames[:-1]]]
    mpixels = np.array([info.width * info.height for info in infos], float) / 1e6
    needed = np.bincount(frames // span, minlength=len(infos))
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
