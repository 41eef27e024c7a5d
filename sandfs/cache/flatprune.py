"""Algorithm 1 (`prune`) over a whole window at once, its objects as columns: the same decisions
as `prune` over the same graphs, in numpy where a video's walk has a closed form.

A window's graphs are flat: video -> frames (each decoded straight from the video, all at the
video's decode seconds a frame) -> clips (leaves, made from a set of frames). `FlatGraphs` holds
them as arrays: per clip its video, bytes, seconds and frames (CSR into per-frame columns).

Where no collapse of a video can save space, its collapse walk is empty and its drop walk only
drops clips: each step drops the cached clip of least (seconds per byte saved, -bytes, position),
its seconds being the decodes of its frames not needed yet (summed one by one, in `prune`'s
order) and its own op. That is `prune`'s walk (its lazily updated heap keeps every cached clip's
current rank, and ranks only fall as frames become needed); here all such videos take their
next step together. No collapse saves space when the video's clips' bytes are at most the
smallest bytes of one clip's frames: a collapse uncaches only clips all of whose frames it
caches, so it caches at least one clip's frames and uncaches at most every clip. The other
videos walk as in `prune`, one graph at a time (`graph_of`).

The merge of the videos' drop walks is a sort: taking the least next step of every walk takes
a walk's steps in blocks, each led by a step ranked above every earlier one of its walk, and the
blocks in the order of their leaders; so the steps go by (the highest rank of their walk so far,
walk, position in the walk). A video's walks are its own: a window is walked a chunk of videos
at a time (`prune_chunks`), and only each chunk's steps are kept for the merge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from sandfs.cache.prune import ObjectGraph, _merge, _Taken, _Video, _walk


@dataclass(frozen=True, slots=True)
class FlatGraphs:
    """A window's flat object graphs. Clips are grouped by video, videos in order 0..V-1, and a
    video's clips in its graph's node order; frame ids index the frame columns."""

    clip_video: np.ndarray  # int64 [C], non-decreasing
    clip_nbytes: np.ndarray  # int64 [C]
    clip_seconds: np.ndarray  # float64 [C]: the op that makes the clip from its frames
    clip_frames: np.ndarray  # int64 [C + 1]: clip i's frames are frame_ids[clip_frames[i]:...]
    frame_ids: np.ndarray  # int64: distinct within a clip; a frame belongs to one video
    frame_nbytes: np.ndarray  # int64 [F]
    frame_seconds: np.ndarray  # float64 [V]: decoding one frame of the video

    def __post_init__(self) -> None:
        clips, videos = len(self.clip_video), len(self.frame_seconds)
        if not (len(self.clip_nbytes) == len(self.clip_seconds) == clips
                and len(self.clip_frames) == clips + 1 and self.clip_frames[0] == 0
                and self.clip_frames[-1] == len(self.frame_ids)):
            raise ValueError("flat graphs need bytes, seconds and frames for every clip")
        if clips and (np.any(np.diff(self.clip_video) < 0) or self.clip_video[0] < 0
                      or self.clip_video[-1] >= videos):
            raise ValueError("flat graphs need clips grouped by video, videos in order")
        if np.any(np.diff(self.clip_frames) < 1):
            raise ValueError("every clip is made from at least one frame")
        if len(self.frame_ids) and (self.frame_ids.min() < 0
                                    or self.frame_ids.max() >= len(self.frame_nbytes)):
            raise ValueError("frame ids must index the frame columns")
        if (np.any(self.clip_nbytes < 0) or np.any(self.frame_nbytes < 0)
                or not np.all(self.clip_seconds >= 0) or not np.all(self.frame_seconds >= 0)):
            raise ValueError("bytes and seconds must be >= 0")

    @property
    def videos(self) -> int:
        return len(self.frame_seconds)


@dataclass(frozen=True, slots=True)
class FlatPrunePlan:
    clips_kept: np.ndarray  # bool [C]
    frames_kept: np.ndarray  # bool [V]: whether any frame of the video is kept
    total_nbytes: int
    added_recompute_seconds: float
    collapses: int
    drops: int


@dataclass(frozen=True, slots=True)
class _Steps:
    """Drop steps of several walks, each walk's in order: what the merge weighs. A step's
    seconds added are its seconds per byte times its bytes (a drop saves > 0 bytes): only
    their sum is reported, so they are not kept."""

    walk: np.ndarray  # int32: the video
    seconds_per_byte: np.ndarray  # float64: `prune`'s, bit for bit
    saved_nbytes: np.ndarray  # int64
    clip: np.ndarray  # int32: fast videos: the clip dropped; -1 for a step of a slow video


_EMPTY = _Steps(np.zeros(0, np.int32), np.zeros(0), np.zeros(0, np.int64),
                np.zeros(0, np.int32))


def prune_flat(graphs: FlatGraphs, budget_bytes: int,
               graph_of: Callable[[int], ObjectGraph],
               wait_turn: Callable[[], object] = lambda: None) -> FlatPrunePlan:
    """`prune` over the window's graphs: the same objects kept, bytes and steps. `graph_of(v)`
    builds video v's `ObjectGraph` (its leaves in the order of its clips here) for the videos
    whose collapses need the general walk; `wait_turn` is called between stages."""
    return prune_chunks([graphs], budget_bytes, graph_of, wait_turn)


def prune_chunks(chunks: Iterable[FlatGraphs], budget_bytes: int,
                 graph_of: Callable[[int], ObjectGraph],
                 wait_turn: Callable[[], object] = lambda: None) -> FlatPrunePlan:
    """`prune_flat` over a window's graphs read a chunk of videos at a time, each chunk's
    videos numbered from 0 and the window's (`graph_of`, the plan's columns) after the
    chunks' before: each video's walks are its own (module doc), so only a chunk's steps are
    kept, not its graphs."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
    walks = _Walks()
    for graphs in chunks:
        walks.add(graphs, graph_of, wait_turn)
        del graphs  # not held while the next chunk is read
    return walks.pruned(budget_bytes, graph_of, wait_turn)


class _Walks:
    """A window's walks as its chunks are read: the fast videos' drop steps (videos and clips
    numbered in the window, 24 bytes a step), the slow videos' collapse walks and clips."""

    def __init__(self) -> None:
        self.videos = self.clips = self.nbytes = 0  # of the chunks read
        self._fast: tuple[list[np.ndarray], ...] = tuple([] for _ in _Steps.__slots__)
        self._collapses: dict[int, list[_Taken]] = {}  # by slow video
        self._slow_clips: dict[int, range] = {}

    def add(self, graphs: FlatGraphs, graph_of: Callable[[int], ObjectGraph],
            wait_turn: Callable[[], object]) -> None:
        slow, video = _collapsible(graphs), graphs.clip_video
        for number in np.flatnonzero(slow).tolist():
            wait_turn()
            first, end = np.searchsorted(video, [number, number + 1]).tolist()
            self._slow_clips[self.videos + number] = range(self.clips + first, self.clips + end)
            self._collapses[self.videos + number] = _walk(_Video(graph_of(self.videos + number)),
                                                          "collapse")
        fast = _fast_drops(graphs, ~slow, wait_turn)
        for parts, column in zip(self._fast, ((fast.walk + self.videos).astype(np.int32),
                                              fast.seconds_per_byte, fast.saved_nbytes,
                                              (fast.clip + self.clips).astype(np.int32)),
                                 strict=True):
            parts.append(column)
        self.videos += graphs.videos
        self.clips += len(video)
        self.nbytes += int(graphs.clip_nbytes.sum())

    def pruned(self, budget_bytes: int, graph_of: Callable[[int], ObjectGraph],
               wait_turn: Callable[[], object]) -> FlatPrunePlan:
        collapses = self._collapses
        total, collapse_seconds, took = _merge(list(collapses.values()), self.nbytes,
                                               budget_bytes)
        drops: dict[int, list[_Taken]] = {}
        steps, took_steps, drop_seconds = _EMPTY, np.zeros(0, bool), 0.0
        if total > budget_bytes:  # every collapse taken: the walks go on from their ends
            for video in collapses:
                wait_turn()
                walked = _Video(graph_of(video))
                _walk(walked, "collapse")
                drops[video] = _walk(walked, "drop")
            steps = self._steps(_slow_drops(drops))
            took_steps, saved, drop_seconds = _taken(steps, total, budget_bytes)
            total -= saved
        clips_kept = np.ones(self.clips, bool)
        fast = steps.clip >= 0
        clips_kept[steps.clip[took_steps & fast]] = False
        frames_kept = np.zeros(self.videos, bool)
        # the slow videos' drops taken (few: a step-long int32 column counts as int64)
        dropped = np.bincount(steps.walk[took_steps & ~fast], minlength=self.videos)
        for video, took_video in zip(collapses, took, strict=True):
            _apply_slow(self._slow_clips[video], video, graph_of(video),
                        collapses[video][:took_video] + drops.get(video, [])[:dropped[video]],
                        clips_kept, frames_kept)
        return FlatPrunePlan(clips_kept, frames_kept, total, collapse_seconds + drop_seconds,
                             sum(took), int(np.count_nonzero(took_steps)))

    def _steps(self, slow: _Steps) -> _Steps:
        """Every walk's drop steps: the fast videos' by chunk, then the slow videos'; a
        column's chunks let go as it is joined, not held beside the whole."""
        columns = []
        for parts, name in zip(self._fast, _Steps.__slots__, strict=True):
            parts.append(getattr(slow, name))
            columns.append(np.concatenate(parts))
            parts.clear()
        return _Steps(*columns)


def _taken(steps: _Steps, total: int, budget_bytes: int) -> tuple[np.ndarray, int, float]:
    """Which steps `_merge` takes (its order: module doc) until the total fits, the bytes
    they save and the seconds they add, summed in that order (a float sum depends on it)."""
    order = _merge_order(steps)
    count, saved_nbytes, over = len(order), 0, total - budget_bytes
    for piece in _pieces(len(order)):  # until one fits
        saved = np.cumsum(steps.saved_nbytes[order[piece]]) + saved_nbytes  # non-decreasing
        fits = int(np.searchsorted(saved, over))  # the step after which the total fits
        if fits < len(saved):
            count, saved_nbytes = piece.start + fits + 1, int(saved[fits])
            break
        saved_nbytes = int(saved[-1])
    took = np.zeros(len(order), bool)
    took[order[:count]] = True
    seconds = 0.0
    for piece in _pieces(count):  # one after the other, as `_merge` adds them
        at = order[piece]
        added = steps.seconds_per_byte[at] * steps.saved_nbytes[at]  # each step's (`_Steps`)
        added[0] += seconds
        seconds = float(np.cumsum(added)[-1])
    return took, saved_nbytes, seconds


_PIECE = 65_536  # steps a piece (`_pieces`)


def _pieces(count: int) -> Iterator[slice]:
    """0..count in slices of `_PIECE`: a step-long column's temporaries a piece at a time."""
    return (slice(start, min(count, start + _PIECE)) for start in range(0, count, _PIECE))


def _collapsible(graphs: FlatGraphs) -> np.ndarray:
    """Per video, whether a collapse might save space (module doc): its walk is the general
    one."""
    video, nbytes = graphs.clip_video, graphs.clip_nbytes
    frame_bytes = np.add.reduceat(graphs.frame_nbytes[graphs.frame_ids], graphs.clip_frames[:-1])
    clips_bytes = np.bincount(video, weights=nbytes, minlength=graphs.videos)
    least_frames = np.full(graphs.videos, np.inf)
    np.minimum.at(least_frames, video, frame_bytes)
    return clips_bytes > least_frames


def _fast_drops(graphs: FlatGraphs, fast: np.ndarray,
                wait_turn: Callable[[], object]) -> _Steps:
    """The drop walks of the `fast` videos, all at once: step t of every walk at pass t."""
    video, starts = graphs.clip_video, graphs.clip_frames
    counts = np.diff(starts)
    sums = _frame_sums(graphs.frame_seconds, int(counts.max(initial=0)))
    position = np.arange(len(video)) - np.searchsorted(video, video)
    needed = np.zeros(len(graphs.frame_nbytes), bool)
    active = fast[video] & (graphs.clip_nbytes > 0)
    found: list[tuple[np.ndarray, ...]] = []
    while active.any():
        wait_turn()
        clips = np.flatnonzero(active)
        frames = gather(graphs.frame_ids, starts, clips)
        unneeded = np.add.reduceat(~needed[frames], _offsets(counts[clips]))
        added = sums[video[clips], unneeded] + graphs.clip_seconds[clips]
        saved = graphs.clip_nbytes[clips]
        ratio = added / saved
        rank = np.lexsort((position[clips], -saved, ratio, video[clips]))
        first = rank[np.r_[True, video[clips][rank[1:]] != video[clips][rank[:-1]]]]
        chosen = clips[first]
        found.append((video[chosen], ratio[first], saved[first], chosen))
        active[chosen] = False
        needed[gather(graphs.frame_ids, starts, chosen)] = True
    if not found:
        return _EMPTY
    columns = [np.concatenate(c) for c in zip(*found, strict=True)]
    by_walk = np.argsort(columns[0], kind="stable")  # each walk's steps in pass order
    return _Steps(*(c[by_walk] for c in columns))


def _frame_sums(frame_seconds: np.ndarray, most: int) -> np.ndarray:
    """[video, n]: n of the video's frame decodes summed one by one from 0, as `prune` sums
    them (a float sum depends on its order)."""
    sums = np.zeros((len(frame_seconds), most + 1))
    for n in range(1, most + 1):
        sums[:, n] = sums[:, n - 1] + frame_seconds
    return sums


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def gather(values: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """values[starts[r]:starts[r + 1]] for each r of `rows`, concatenated."""
    counts = starts[rows + 1] - starts[rows]
    within = np.arange(counts.sum()) - np.repeat(_offsets(counts), counts)
    return values[np.repeat(starts[rows], counts) + within]


def _slow_drops(walks: dict[int, list[_Taken]]) -> _Steps:
    rows = [(video, step.order[0][0], step.saved_nbytes)
            for video, walk in walks.items() for step in walk]
    if not rows:
        return _EMPTY
    video, ratio, saved = (np.array(c) for c in zip(*rows, strict=True))
    return _Steps(video.astype(np.int32), ratio.astype(np.float64), saved.astype(np.int64),
                  np.full(len(rows), -1, np.int32))


def _merge_order(steps: _Steps) -> np.ndarray:
    """The order `_merge` takes the steps in (module doc): by the highest (seconds per byte,
    -bytes) of the step's walk so far, then walk, then position in the walk (a walk's steps
    are together, in its order). One int64 key a step, made in place: a window's steps."""
    count = len(steps.walk)
    if not count:
        return np.zeros(0, np.int64)
    rank = _ranks(steps.seconds_per_byte, steps.saved_nbytes)
    places, walks = int(rank.max()) + 1, int(steps.walk.max()) + 1
    # each walk lifted above the walks before it: one running max serves them all
    key = np.zeros(count, np.int64)
    key[1:] = steps.walk[1:] != steps.walk[:-1]
    np.cumsum(key, out=key)  # in place: from a bool column, a step-long int64 copy first
    key *= places
    key += rank
    del rank
    np.maximum.accumulate(key, out=key)
    key %= places  # the highest rank of the step's walk so far
    key *= walks  # < steps x videos: far below 2**63
    key += steps.walk
    return np.argsort(key, kind="stable")  # a walk's ties in its order


def _ranks(ratio: np.ndarray, saved: np.ndarray) -> np.ndarray:
    """Each step's place among the distinct (seconds per byte, -bytes) of the steps (int32:
    fewer places than steps). `saved` is negated in place for the sort, then back: not a
    step-long copy."""
    np.negative(saved, out=saved)
    try:
        by_rank = np.lexsort((saved, ratio))
    finally:
        np.negative(saved, out=saved)
    rank = np.empty(len(by_rank), np.int32)
    place = 0
    for piece in _pieces(len(by_rank)):
        at = by_rank[piece]
        # each step's predecessor in rank order (the first step's: itself, not new)
        before = by_rank[np.maximum(np.arange(piece.start, piece.stop) - 1, 0)]
        places = np.cumsum((ratio[at] != ratio[before]) | (saved[at] != saved[before])) + place
        rank[at] = places
        place = int(places[-1])
    return rank


def _apply_slow(clips: range, video: int, graph: ObjectGraph, steps: list[_Taken],
                clips_kept: np.ndarray, frames_kept: np.ndarray) -> None:
    """A slow video's result: its leaves minus what its steps uncached, plus what they
    cached."""
    walked = _Video(graph)
    cached = set(walked.leaves())
    for step in steps:
        cached.difference_update(step.uncache)
        cached.update(step.cache)
    leaves = [graph.names[i] for i in range(len(graph.names)) if not walked.children[i]
              and i != walked.root]
    if len(leaves) != len(clips):
        raise ValueError(f"graph_of({video}) has {len(leaves)} leaves for {len(clips)} clips")
    clips_kept[clips.start:clips.stop] = [name in cached for name in leaves]
    frames_kept[video] = bool(cached.difference(leaves))
