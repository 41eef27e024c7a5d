"""The objects a window makes and keeps: their store keys, their sizes, and what pruning keeps
on disk. A *clip* is one slot of one batch (leaf); its parents are decoded *frames*; their root is
the video. Pruning (Algorithm 1, `sandfs.cache.prune`) picks the clips and frames to keep."""

from __future__ import annotations

import logging
import math
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from sandfs import ops as oplib
from sandfs.cache import ObjectGraph, ObjectKey, ObjectStore, Stack
from sandfs.materialize import FrameKey, Prefixed, clip_frame_keys
from sandfs.media.gop import frames_to_decode
from sandfs.media.types import VideoInfo
from sandfs.ops.base import OpInstance
from sandfs.plan.hashrows import HashRows
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.uses import ColumnUses, UseColumns, WindowUses, row_views
from sandfs.plan.window import ClipUse, VideoWork, ViewKey, WindowPlan
from sandfs.sched.leafrows import LeafRows, VideoUses, leaf_rows, leaf_total, out_frame_nbytes

log = logging.getLogger(__name__)

PRUNE_TARGET_FRACTION = 0.7  # plan below the store's 75% eviction mark
DECODE_SECONDS_PER_MPIXEL = 0.006  # cost model seeds (docs/performance.md)
AUGMENT_SECONDS_PER_MPIXEL = 0.0015
PRUNE_MODES = ("algorithm1", "leaves")  # leaves: the ablation that keeps final clips only


@dataclass(frozen=True, slots=True)
class Spot:
    """One slot of one batch: where a clip goes."""

    view: ViewKey
    slot: int

    @classmethod
    def of(cls, use: ClipUse) -> Spot:
        return cls(use.view, use.slot)


NO_CLIPS: frozenset[Spot] = frozenset()


class KeptClips(AbstractSet[Spot]):
    """Some of a video's uses in a window, as the spots they go to: the uses (the window's
    own sequence, not copied) and a bit each, not a set of `Spot`s (~43 bytes a clip of a
    planned window at 20,000 videos); a `Spot` is made when one is asked for. Made for one
    job's admission (`KeptWindow.__getitem__`), which asks for each of its pending clips:
    the kept (batch, slot) pairs are found once, at the first ask, not a walk an ask."""

    __slots__ = ("_kept", "_mask", "_uses")

    def __init__(self, uses: Sequence[ClipUse], mask: int) -> None:
        if mask < 0 or mask >> len(uses):
            raise ValueError(f"mask {mask:#x} marks uses past the video's {len(uses)}")
        self._uses, self._mask = uses, mask
        self._kept: frozenset[tuple[ViewKey, int]] | None = None  # its own: found once

    def _spots(self) -> Iterator[tuple[ViewKey, int, bool]]:
        """(batch, slot, kept) of each use, in order, with no `ClipUse` made."""
        mask = self._mask
        if isinstance(self._uses, ColumnUses):
            rows, slots = self._uses.columns
            views: Iterable[ViewKey] = row_views(rows)
        else:
            views, slots = (u.view for u in self._uses), [u.slot for u in self._uses]
        for index, (view, slot) in enumerate(zip(views, slots, strict=True)):
            yield view, slot, bool(mask >> index & 1)

    def __contains__(self, spot: object) -> bool:
        if not isinstance(spot, Spot):
            return False
        if self._kept is None:
            self._kept = frozenset((view, slot) for view, slot, kept in self._spots() if kept)
        return (spot.view, spot.slot) in self._kept

    def __iter__(self) -> Iterator[Spot]:
        return (Spot(view, slot) for view, slot, kept in self._spots() if kept)

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __repr__(self) -> str:
        return f"KeptClips({set(self)!r})"


@dataclass(frozen=True, slots=True)
class DiskPlan:
    """What pruning keeps on disk for one video in one window: its clips (`KeptClips`, or
    none) and whether its frames. Made when asked for (`KeptWindow`)."""

    clips: AbstractSet[Spot] = NO_CLIPS
    frames: bool = False


class KeptWindow(Mapping[str, DiskPlan]):
    """What a window keeps on disk, by video: a row for each video that keeps anything (its
    uses, a bit each, and whether its frames), found by its path's hash; a `DiskPlan` is
    made when one is asked for. A dict of plans, each with a set of `Spot`s, held ~190 bytes
    a clip of a window whose clips all fit (the store's default size)."""

    __slots__ = ("_frames", "_masks", "_rows", "_uses")

    def __init__(self, paths: Sequence[str], uses: Sequence[Sequence[ClipUse]],
                 masks: Sequence[int], frames: np.ndarray) -> None:
        self._rows, order = HashRows.of(paths)
        rows = order.tolist()
        self._uses = uses.take(order) if isinstance(uses, _Ranges) else compact_uses(
            [uses[i] for i in rows])
        self._masks = [masks[i] for i in rows]
        self._frames = np.asarray(frames, bool)[order]

    def __getitem__(self, path: str) -> DiskPlan:
        row = self._rows.row(path)
        if row < 0:
            raise KeyError(path)
        mask = self._masks[row]
        return DiskPlan(KeptClips(self._uses[row], mask) if mask else NO_CLIPS,
                        bool(self._frames[row]))

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows.keys)

    def __len__(self) -> int:
        return len(self._rows)

    def framed(self) -> list[str]:
        """The videos whose frames are kept."""
        return [self._rows.keys[row] for row in np.flatnonzero(self._frames).tolist()]


class _Ranges(Sequence[WindowUses]):
    """Videos' uses that are ranges of one window's columns, as two int columns: not a
    `WindowUses` and its two ints held a video (~110 bytes a video that keeps anything)."""

    __slots__ = ("_columns", "_ends", "_starts")

    def __init__(self, columns: UseColumns, starts: np.ndarray, ends: np.ndarray) -> None:
        self._columns = columns
        self._starts, self._ends = array("q"), array("q")
        self._starts.frombytes(np.asarray(starts, np.int64).tobytes())
        self._ends.frombytes(np.asarray(ends, np.int64).tobytes())

    @classmethod
    def of(cls, uses: Sequence[WindowUses]) -> _Ranges:
        return cls(uses[0].columns_and_range[0],
                   np.fromiter((u.columns_and_range[1] for u in uses), np.int64, len(uses)),
                   np.fromiter((u.columns_and_range[2] for u in uses), np.int64, len(uses)))

    def take(self, indices: np.ndarray) -> _Ranges:
        """These videos' ranges, in the order of `indices`."""
        return _Ranges(self._columns, np.frombuffer(self._starts, np.int64)[indices],
                       np.frombuffer(self._ends, np.int64)[indices])

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):  # type: ignore[override]  # an int only
        return WindowUses(self._columns, self._starts[index], self._ends[index])


def use_ranges(columns: UseColumns, starts: np.ndarray,
               ends: np.ndarray) -> Sequence[WindowUses]:
    """Videos' uses as their ranges [start, end) of a window's columns."""
    return _Ranges(columns, starts, ends)


def compact_uses(uses: list[Sequence[ClipUse]]) -> Sequence[Sequence[ClipUse]]:
    """The videos' uses as `_Ranges` where each is a range of the same window's columns."""
    if type(uses) is _Ranges:
        return uses
    if uses and all(type(u) is WindowUses for u in uses) and len(
            {id(u.columns_and_range[0]) for u in uses}) == 1:
        return _Ranges.of(uses)  # type: ignore[arg-type]
    return uses


def joined_uses(parts: Sequence[Sequence[Sequence[ClipUse]]]) -> Sequence[Sequence[ClipUse]]:
    """Chunks of videos' uses (`compact_uses`) as one: ranges of one window's columns where
    every chunk's are."""
    if parts and all(type(p) is _Ranges for p in parts) and len(
            {id(p._columns) for p in parts}) == 1:  # type: ignore[attr-defined]
        return _Ranges(parts[0]._columns, *(  # type: ignore[attr-defined]
            np.concatenate([np.frombuffer(getattr(p, name), np.int64) for p in parts])
            for name in ("_starts", "_ends")))
    return [uses for part in parts for uses in part]


def kept_window(paths: Sequence[str], uses: Sequence[Sequence[ClipUse]], video: np.ndarray,
                within: np.ndarray, frames: np.ndarray | None = None) -> KeptWindow:
    """What the videos `paths` (with their `uses`) keep: clip i is use `within[i]` of video
    `video[i]` (sorted); `frames`: whether each keeps its frames (None: none does). Only
    videos that keep anything have a row."""
    masks = np.array(_masks(len(paths), video, within), object)
    framed = np.zeros(len(paths), bool) if frames is None else np.asarray(frames, bool)
    rows = np.flatnonzero((masks != 0) | framed)
    kept = uses.take(rows) if isinstance(uses, _Ranges) else [uses[i] for i in rows.tolist()]
    return KeptWindow([paths[i] for i in rows.tolist()], kept, masks[rows].tolist(),
                      framed[rows])


def _masks(count: int, video: np.ndarray, within: np.ndarray) -> list[int]:
    """Each video's bits of its kept uses, in numpy where they fit in 63 bits."""
    masks = np.zeros(count, np.int64)
    narrow = within < 63
    bits = np.left_shift(np.int64(1), within[narrow].astype(np.int64))  # not `within`'s width
    np.bitwise_or.at(masks, video[narrow], bits)
    found = masks.tolist()
    for index, bit in zip(video[~narrow].tolist(), within[~narrow].tolist(), strict=True):
        found[index] |= 1 << bit  # a video with more uses in the window: as a Python int
    return found


def clip_object_key(use: ClipUse, info: VideoInfo) -> ObjectKey:
    return ObjectKey.of("clip", use.view.parts, use.slot, info.path, info.size_bytes,
                        info.mtime_ns)


def frame_object_key(info: VideoInfo, frame: FrameKey) -> ObjectKey:
    index, source = frame
    return ObjectKey.of("frame", info.path, info.size_bytes, info.mtime_ns, index, source)


@dataclass(frozen=True, slots=True)
class FramePack:
    """Frames of one video carried for a later window, kept as ONE store object: the frames of
    one source that all leave the same first op (or none), stacked in index order. Creating a
    store file costs ~0.5 ms of CPU on ext4 (a put of a 340x256 frame: 0.5-0.8 ms, of which
    the write itself ~0.1 ms), as much as decoding the frame: with one object per frame,
    carrying cost more than the decoding it saved."""

    source: tuple | None
    first: OpInstance | None  # applied before keeping: `Prefixed` frames
    indices: tuple[int, ...]

    @property
    def frame_keys(self) -> list[FrameKey]:
        return [(index, self.source) for index in self.indices]

    def object_key(self, info: VideoInfo) -> ObjectKey:
        """Named by its exact content (frames, source and op), so a window planned differently
        (a task joined) never reads another plan's pack."""
        op = None if self.first is None else (self.first.name, self.first.params,
                                              self.first.drawn)
        return ObjectKey.of("frame", info.path, info.size_bytes, info.mtime_ns, "pack",
                            self.source, op, self.indices)

    def stack(self, frames: Mapping[FrameKey, np.ndarray]) -> Stack:
        """The pack's frames from the decoded ones, after its first op, to store as one
        object (written frame by frame: no stacked copy)."""
        chosen = [frames[key] for key in self.frame_keys]
        if self.first is not None:
            chosen = oplib.apply_instance(self.first, chosen)
        return Stack(tuple(chosen))

    def unstack(self, array: np.ndarray) -> dict[FrameKey, object] | None:
        """The frames of a stored pack (`Prefixed` after its first op); None when it does not
        hold as many frames as it should."""
        if array.ndim != 4 or array.shape[0] != len(self.indices):
            return None
        if self.first is None:
            return dict(zip(self.frame_keys, array, strict=True))
        return {key: Prefixed(self.first, frame)
                for key, frame in zip(self.frame_keys, array, strict=True)}


def frame_packs(frame_keys: Iterable[FrameKey],
                firsts: Mapping[FrameKey, OpInstance]) -> list[FramePack]:
    """The packs that hold `frame_keys`: one per (source, first op of all its clips)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for index, source in frame_keys:
        groups[source, firsts.get((index, source))].append(index)
    packs = [FramePack(source, first, tuple(sorted(indices)))
             for (source, first), indices in groups.items()]
    return sorted(packs, key=lambda pack: pack.indices)


def mark_read(store: ObjectStore, key: ViewKey, plan: TaskPlan, view: ViewPlan) -> None:
    """Every reader has the batch: its clips on disk are the first to evict."""
    for slot, clip in enumerate(view.clips):
        use = ClipUse(key, slot, clip, ())
        store.mark_done(clip_object_key(use, plan.videos[clip.video_index]))


def frame_nbytes(info: VideoInfo, frame: FrameKey) -> int:
    """RGB bytes of a decoded frame: full size, or its decode_resize."""
    height, width = _decoded_hw(info, frame)
    return height * width * 3


def first_reader(use: ClipUse) -> int:
    """The soonest position at which a task reads the clip's batch."""
    return min((position for _, position in use.readers), default=0)


def making_order(uses: Sequence[ClipUse]) -> list[int]:
    """The order a decode pass makes its clips in (positions in `uses`): the clips of its
    soonest batch first, a reader may be waiting for them; then each as soon as its frames
    are in, so that its frames are let go early. A clip is made once its frames are in and
    those before it are made."""
    firsts = [first_reader(use) for use in uses]
    soonest = min(firsts, default=0)
    return sorted(range(len(uses)), key=lambda p: (
        firsts[p] != soonest, max(uses[p].clip.frame_indices), firsts[p]))


def pass_frame_bytes(info: VideoInfo, uses: Sequence[ClipUse],
                     held: Iterable[FrameKey] = ()) -> int:
    """The most bytes of decoded frames a pass making `uses` holds at once, in RGB: each
    frame from its decoding until its last clip is made (`making_order`), the `held` ones
    (kept on disk, carried to later windows) until the pass ends."""
    released_after: dict[FrameKey, int] = {}
    made_at = -1
    for position in making_order(uses):
        clip = uses[position].clip
        made_at = max(made_at, max(clip.frame_indices))
        for key in clip_frame_keys(clip):
            released_after[key] = max(released_after.get(key, -1), made_at)
    for key in held:
        released_after[key] = math.inf
    change: defaultdict[float, int] = defaultdict(int)
    for key, last in released_after.items():
        nbytes = frame_nbytes(info, key)
        change[key[0]] += nbytes
        change[last + 1] -= nbytes
    peak = held_now = 0
    for index in sorted(change):
        held_now += change[index]
        peak = max(peak, held_now)
    return peak


def _decoded_hw(info: VideoInfo, frame: FrameKey) -> tuple[int, int]:
    return frame[1][0] if frame[1] else (info.height, info.width)


def kept_frame_nbytes(info: VideoInfo, frame: FrameKey, first: OpInstance | None) -> int:
    """Bytes of a decoded frame as a pass carries it: after its clips' first op (its
    decoded size where that op's output size depends on the frame)."""
    nbytes = frame_nbytes(info, frame)
    if first is None:
        return nbytes
    shape = oplib.get_op(first.name).output_shape(dict(first.params),
                                                  oplib.FrameShape(*_decoded_hw(info, frame)))
    if shape.height is None or shape.width is None:
        return nbytes
    return shape.height * shape.width * 3 * np.dtype(shape.dtype).itemsize


def clip_nbytes(plan: TaskPlan, use: ClipUse) -> int:
    return len(use.clip.frame_indices) * out_frame_nbytes(plan)


def object_graph(work: VideoWork, window: WindowPlan) -> ObjectGraph:
    """One video's objects in a window for pruning: video -> frames -> clips, with sizes and
    the cost (seconds) of the op that makes each from its parents."""
    info = work.info
    decode_per_frame, share = video_seconds(work)
    frame_keys = sorted(work.frame_keys, key=repr)
    position = {key: i for i, key in enumerate(frame_keys, start=1)}
    clip_parents = [tuple(sorted(position[key] for key in clip_frame_keys(use.clip)))
                    for use in work.uses]
    return ObjectGraph(
        names=(("video",), *(("frame", key) for key in frame_keys),
               *(("clip", use.view, use.slot) for use in work.uses)),
        parents=((), *((0,),) * len(frame_keys), *clip_parents),
        nbytes=(0, *(frame_nbytes(info, key) for key in frame_keys),
                *(clip_nbytes(window.views[use.view][0], use) for use in work.uses)),
        make_seconds=(0.0, *(decode_per_frame,) * len(frame_keys),
                      *(share * len(parents) for parents in clip_parents)))


def video_seconds(work: VideoWork) -> tuple[float, float]:
    """The cost model of a video's objects: (seconds to decode one of its frames, seconds of
    a clip's op per frame it is made from)."""
    info = work.info
    mpixels = info.width * info.height / 1e6
    frames = sorted(work.frames)
    return (DECODE_SECONDS_PER_MPIXEL * mpixels * frames_to_decode(info, frames)
            / max(1, len(frames)), AUGMENT_SECONDS_PER_MPIXEL * mpixels)


def prune_room(budget_bytes: int) -> int:
    """What pruning may keep of a store's budget (the rest absorbs writes in flight)."""
    return int(budget_bytes * PRUNE_TARGET_FRACTION)


def needs_pruning(plan: WindowPlan, budget_bytes: int, mode: str,
                  nbytes: int | None = None) -> bool:
    """Whether Algorithm 1 has work to do: not when every clip fits (it starts from every clip
    and stops at once), nor in the `leaves` ablation. `nbytes`: the window's
    `leaves_nbytes`, when known."""
    if mode == "leaves":
        return False
    if (leaves_nbytes(plan) if nbytes is None else nbytes) <= prune_room(budget_bytes):
        log.info("window %d: every clip fits on disk", plan.window)
        return False
    return True


def soonest_clips(plan: WindowPlan, budget_bytes: int,
                  rows: LeafRows | None = None) -> KeptWindow:
    """The clips needed soonest that fit on disk: what the `leaves` ablation and Algorithm 1
    with every clip fitting keep, and what jobs keep until pruning has decided. Only videos
    that keep a clip have a plan. `rows`: the window's `leaf_rows`, when made already."""
    return _leaves_only(plan, rows or leaf_rows(plan), prune_room(budget_bytes))


def leaves_nbytes(plan: WindowPlan) -> int:
    return leaf_total(plan)


def _leaves_only(plan: WindowPlan, rows: LeafRows, room: int) -> KeptWindow:
    """Final clips only, the soonest needed first (then by path and slot, ties in the
    window's order), as long as they fit."""
    path_rank = np.empty(len(rows.paths), np.int64)
    path_rank[sorted(range(len(rows.paths)), key=rows.paths.__getitem__)] = np.arange(
        len(rows.paths))
    order = np.lexsort((rows.slot, path_rank[rows.video], rows.first))  # stable, as sorted()
    fitting = np.searchsorted(np.cumsum(rows.nbytes[order]), room, side="right")
    kept = np.sort(order[:fitting])
    video = rows.video[kept]
    videos = np.unique(video)
    first_use = np.searchsorted(rows.video, videos)  # rows go video by video, uses in order
    compact = np.searchsorted(videos, video)
    paths = [rows.paths[index] for index in videos.tolist()]
    ranges = rows.uses.ranges(videos) if isinstance(rows.uses, VideoUses) else None
    uses = _Ranges(*ranges) if ranges else [rows.uses[index] for index in videos.tolist()]
    return kept_window(paths, uses, compact, kept - first_use[compact])
