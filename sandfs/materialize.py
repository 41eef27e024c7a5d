"""Turn a planned object into its bytes: decode the needed frames, apply the planned ops, pack.

Blocking code: the scheduler and the on-demand objects run it in worker threads (PyAV and
OpenCV release the GIL).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass

import numpy as np

from sandfs import ops as oplib
from sandfs.faults import fault_point
from sandfs.media.decode import Tally, Unconverted, converted, decode_each, deferred
from sandfs.media.gop import frames_to_decode
from sandfs.media.types import VideoInfo
from sandfs.npy import npy_buffer, npy_bytes
from sandfs.ops.base import OpInstance
from sandfs.plan.task import StreamClip, TaskPlan, ViewPlan
from sandfs.stats import Stats

FrameKey = tuple[int, tuple | None]  # (frame index, source: None or a decode_resize)


def clip_frame_keys(clip: StreamClip) -> set[FrameKey]:
    return {(index, clip.source) for index in clip.frame_indices}


@dataclass(frozen=True, slots=True)
class Prefixed:
    """A frame as it is after `op`, the first op of every clip that uses it (a frame kept on
    disk for a later window is kept so: a resized frame is smaller, and resized once)."""

    op: OpInstance
    array: np.ndarray


def first_ops(clips: Iterable[StreamClip]) -> dict[FrameKey, OpInstance]:
    """The frames whose clips all start with the same op instance, and that op."""
    seen: dict[FrameKey, OpInstance | None] = {}
    for clip in clips:
        first = clip.ops[0] if clip.ops else None
        for key in clip_frame_keys(clip):
            seen[key] = first if seen.get(key, first) == first else None
    return {key: op for key, op in seen.items() if op is not None}


class Materializer:
    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def decode(self, info: VideoInfo, wanted: set[FrameKey]) -> dict[FrameKey, np.ndarray]:
        """One decode pass for frames `wanted` = {(index, source)}: each frame converted once
        per source it is wanted in (full-size RGB, or scaled in the decoder: decode_resize)."""
        frames: dict[FrameKey, np.ndarray] = {}
        for _, keyed in self.decode_each(info, wanted):
            frames.update(keyed)
        return converted(frames, list(frames))

    def decode_each(self, info: VideoInfo, wanted: set[FrameKey],
                    ) -> Iterator[tuple[int, dict[FrameKey, Unconverted]]]:
        """`decode` frame by frame, in index order: (index, its wanted keys and frames), each
        checked as it comes (`media.decode.decode_each`). The frames come `Unconverted`: a
        pass converts those a clip uses when it makes the clip."""
        sources = {source for _, source in wanted}
        tally, counted = Tally(), 0
        each = decode_each(info, sorted({index for index, _ in wanted}), deferred(sources),
                           tally)
        with closing(each):
            for index, by_source in each:
                if not counted:  # before any frame is used
                    fault_point("after_decode")
                # counted before the frame is handed on: its batch may be read, and the
                # counters with it, before the pass ends
                self.stats.add("frames_decoded", tally.frames - counted)
                counted = tally.frames
                yield index, {(index, source): array for source, array in by_source.items()
                              if (index, source) in wanted}
        self.stats.add("frames_decoded", tally.frames - counted)

    def augmenter(self, clips: Sequence[StreamClip],
                  readers: Sequence[int] | None = None) -> Augmenter:
        return Augmenter(self, clips, readers)

    def augment_clips(
        self, clips: Sequence[StreamClip], frames: dict[FrameKey, np.ndarray],
        readers: Sequence[int] | None = None,
    ) -> Iterator[np.ndarray]:
        """Each clip's frames through its ops, as (T, H, W, C) arrays in order (`Augmenter`).
        `readers`: how many tasks read each clip (what independent execution would have
        computed)."""
        yield from Augmenter(self, clips, readers).run(range(len(clips)), frames)

    def count_aug_ops(self, clips: Sequence[StreamClip], readers: Sequence[int], performed: int,
                      crops: int) -> None:
        pairs = list(zip(clips, readers, strict=True))
        independent = sum(n * len(c.frame_indices) * len(c.ops) for c, n in pairs)
        independent_crops = sum(
            n * len(c.frame_indices) * sum(o.name in oplib.CROP_OPS for o in c.ops)
            for c, n in pairs
        )
        self.stats.add("aug_ops", performed)
        self.stats.add("aug_ops_independent", independent)
        self.stats.add("crop_ops", crops)
        self.stats.add("crop_ops_independent", independent_crops)

    def fill_view(self, plan: TaskPlan, view: ViewPlan, batch: np.ndarray) -> None:
        by_video: dict[int, set[FrameKey]] = defaultdict(set)
        for clip in view.clips:
            by_video[clip.video_index].update(clip_frame_keys(clip))
        for video_index, indices in by_video.items():
            frames = self.decode(plan.videos[video_index], indices)
            slots = [s for s, c in enumerate(view.clips) if c.video_index == video_index]
            clips = self.augment_clips([view.clips[s] for s in slots], frames)
            for slot, clip in zip(slots, clips, strict=True):
                batch[slot] = to_layout(clip, view.layout)
        fault_point("batch_assemble")
        self.count_independent(plan, view)

    def count_independent(self, plan: TaskPlan, view: ViewPlan, readers: int = 1) -> None:
        """What decoding each clip on its own would have cost (the baseline SAND saves against),
        for each of `readers` tasks loading alone. Streams of one clip share its frames, so
        count each (video, sample) once."""
        seen: set[tuple[int, int]] = set()
        needed = 0
        for clip in view.clips:
            if (clip.video_index, clip.sample) in seen:
                continue
            seen.add((clip.video_index, clip.sample))
            info = plan.videos[clip.video_index]
            needed += frames_to_decode(info, sorted(set(independent_frames(plan, view, clip))))
        self.stats.add("frames_decoded_independent", needed * readers)

    def view_bytes(self, plan: TaskPlan, view: ViewPlan) -> memoryview:
        buffer = npy_buffer(view.shape, view.dtype)
        self.fill_view(plan, view, buffer.array)
        self.stats.add("views_materialized")
        return memoryview(buffer.whole)

    def frame_bytes(self, info: VideoInfo, frame_index: int, ops: tuple = (),
                    source: tuple | None = None) -> bytes:
        """aug0 (no ops) or aug{D}: one decoded frame after the given planned ops."""
        frame = self.decode(info, {(frame_index, source)})[(frame_index, source)]
        if ops:
            frame = oplib.apply_chain(ops, [frame])[0]
        return npy_bytes(frame)


class Augmenter:
    """The clips of one pass through their ops, a few at a time as their frames arrive. An
    augmented frame that several clips share — the same frame after the same op instances (a
    common resize, a shared crop window, identical draws) — is computed once, whichever call
    makes each clip: it is kept until the last clip that needs it is made."""

    def __init__(self, materializer: Materializer, clips: Sequence[StreamClip],
                 readers: Sequence[int] | None = None) -> None:
        self.materializer = materializer
        self.clips = list(clips)
        self.readers = list(readers or [1] * len(self.clips))
        prefix_ids: dict[tuple, int] = {}
        self.chains = [[prefix_ids.setdefault(clip.ops[: d + 1], len(prefix_ids))
                        for d in range(len(clip.ops))] for clip in self.clips]
        self.remaining: Counter[tuple] = Counter(
            ((i, clip.source), pid) for clip, ids in zip(self.clips, self.chains, strict=True)
            for i in clip.frame_indices for pid in ids
        )
        self.memo: dict[tuple, np.ndarray] = {}
        self.performed = self.crops = 0  # of the clip being made

    def run(self, positions: Iterable[int],
            frames: Mapping[FrameKey, np.ndarray | Prefixed],
            outs: Mapping[int, np.ndarray] | None = None) -> Iterator[np.ndarray]:
        """The clips at `positions` (of those given at the start), as (T, H, W, C) arrays.
        `outs`: where to put the clip at a position (a batch's slot, seen as (T, H, W, C)), so
        it is not made in a new array and copied there; a clip of another shape is made in a
        new array. Each clip's ops are counted once it is made, before it is handed on (its
        batch may be read, and the counters with it, before the rest of the pass is done)."""
        for position in positions:
            self.performed = self.crops = 0
            out = None if outs is None else outs.get(position)
            clip = self._clip(self.clips[position], self.chains[position], frames, out)
            self.materializer.count_aug_ops([self.clips[position]], [self.readers[position]],
                                            self.performed, self.crops)
            yield clip

    def _clip(self, clip: StreamClip, ids: list[int],
              frames: Mapping[FrameKey, np.ndarray | Prefixed],
              out: np.ndarray | None = None) -> np.ndarray:
        """Each frame goes into `out` as soon as it is made, while it fits there: its last op's
        array is freed at once and the next frame's reuses that memory. Held until the clip was
        stacked, a clip's 32 frames took fresh pages every time (1,180 page faults a
        SlowFast-size clip, half the time of cropping and flipping it)."""
        into = out if out is not None and out.shape[0] == len(clip.frame_indices) else None
        fits = None if into is None else (into.shape[1:], into.dtype)  # what a frame must be
        made: list[np.ndarray] = []
        for t, i in enumerate(clip.frame_indices):
            frame = self._frame(clip, ids, i, frames)
            if fits is not None and (frame.shape, frame.dtype) != fits:
                if t:  # never broadcast into the slot
                    raise ValueError(f"frame {i} came out {frame.dtype}{list(frame.shape)}, "
                                     f"the clip's first {fits[1]}{list(fits[0])}")
                into = fits = None  # a clip of another shape than its slot: made in a new array
            if into is None:
                made.append(frame)
            else:
                into[t] = frame
        return into if into is not None else np.stack(made)

    def _frame(self, clip: StreamClip, ids: list[int], i: int,
               frames: Mapping[FrameKey, np.ndarray | Prefixed]) -> np.ndarray:
        """Frame `i` of the clip through its ops; a step several clips share is done once."""
        frame, start = frames[(i, clip.source)], 0
        if isinstance(frame, Prefixed):  # its first op is applied already
            if clip.ops[:1] != (frame.op,):
                raise ValueError(f"frame {i} was kept after {frame.op.name}, which "
                                 f"this clip does not start with")
            frame, start = frame.array, 1
        for op, pid in zip(clip.ops[start:], ids[start:], strict=True):
            key = ((i, clip.source), pid)
            self.remaining[key] -= 1
            cached = (self.memo.pop(key, None) if self.remaining[key] == 0
                      else self.memo.get(key))
            if cached is None:
                cached = oplib.apply_instance(op, [frame])[0]
                self.performed += 1
                self.crops += op.name in oplib.CROP_OPS
                if self.remaining[key] > 0:
                    self.memo[key] = cached
            frame = cached
        return frame


def to_layout(clip: np.ndarray, layout: str) -> np.ndarray:
    """A (T, H, W, C) clip in the view's layout."""
    return clip.transpose(3, 0, 1, 2) if layout == "NCTHW" else clip


def as_thwc(slot: np.ndarray, layout: str) -> np.ndarray:
    """A batch's slot (one clip in the view's layout) seen as (T, H, W, C): `to_layout`'s
    inverse, a view of the same memory."""
    return slot.transpose(1, 2, 3, 0) if layout == "NCTHW" else slot


def independent_frames(plan: TaskPlan, view: ViewPlan, clip: StreamClip) -> tuple[int, ...]:
    """The frames a loader decodes for this clip alone: those before temporal ops. A clip of a
    path with none (`plan.temporal`) carries them; otherwise the plan draws them again,
    ~0.25 ms a clip in the event loop once its window's draws are released."""
    if not plan.temporal[clip.stream]:
        return clip.frame_indices
    return plan.clip_frames(view.epoch, clip.video_index, clip.sample)
