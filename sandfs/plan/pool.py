"""The shared frame pool (SAND §5.2, temporal randomness).

For each (video, k-epoch window) the pool fixes a frame grid (the GCD of the strides of all
tasks reading the dataset, with a random phase) and a random *offset*. Every (epoch, sample) of
the window then places one *pool clip* as long as the longest task's span: `offset + u` grid
slots, with `u` drawn from the pool's own randomness within the pool's width. Clips of one
window therefore overlap, so one decode pass serves them all, while each start stays uniform
over the valid range (the offset is uniform and the sum wraps around modulo the valid slots).

Each task takes its clip for that (epoch, sample) *inside* the pool clip, at the same quantile
of its own valid range: shorter clips nest in longer ones, so tasks share frames and (with equal
crop sizes) cropped frames, and each task's own starts stay exactly uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sandfs.plan.draws import below, digest_words, key_texts, unit_columns

POOL_SPANS = 2  # the pool's width, in spans of the longest clip: reuse vs. diversity per window


@dataclass(frozen=True, slots=True)
class FramePool:
    key: int  # seed of the pool's randomness (from the dataset, not from any task)
    grid: int  # frames between grid points: the GCD of the sharing tasks' strides
    width_frames: int  # clip starts of one window vary within this many frames
    span_frames: int  # the pool clip: the longest span of the tasks sharing the pool

    def anchors(self, window: int, names: Sequence[str]) -> np.ndarray:
        """The pool's own draws for each video in a window (`names`: repr(name) of each), the
        same for every clip of that window: its grid phase and its offset (as a fraction of
        the valid range), rows of two uniform draws."""
        return unit_columns(digest_words(key_texts((self.key, "pool", window), names)))

    def starts(self, window: int, names: Sequence[str], epoch: int, samples: int,
               num_frames: np.ndarray, span: int, anchors: np.ndarray) -> np.ndarray:
        """The first frame of the clip of (epoch, sample) spanning `span` frames, for every
        video (`names`: repr(name) of each; rows: `num_frames` >= span each) and sample
        (columns); `anchors`: the videos' (`anchors`)."""
        grid = self.grid
        phase, offset = anchors.T
        phase = below(np.int64(grid), phase)
        frames = num_frames.astype(np.int64)[:, None]
        phase = np.where(phase > frames[:, 0] - span, 0, phase)[:, None]
        own_slots = (frames - span - phase) // grid + 1
        pool_slots = (frames - self.span_frames - phase) // grid + 1
        # the pool clip does not fit, or is shorter than the task's: the task's own range
        pool_slots = np.where((pool_slots < 1) | (pool_slots > own_slots), own_slots, pool_slots)
        width = np.minimum(pool_slots, max(1, self.width_frames // grid))
        draws = unit_columns(digest_words(key_texts(
            (self.key, "clip", window),
            [f"{name}, {epoch!r}, {sample!r}" for name in names for sample in range(samples)])))
        slot_draw = draws[:, 0].reshape(len(names), samples)
        quantile_draw = draws[:, 1].reshape(len(names), samples)
        pool_slot = ((offset[:, None] * pool_slots).astype(np.int64)
                     + below(width, slot_draw)) % pool_slots
        # the same quantile of the task's own range: uniform, and inside the pool clip
        position = (pool_slot + quantile_draw) / pool_slots
        return phase + grid * np.minimum(own_slots - 1,
                                         np.floor(position * own_slots).astype(np.int64))
