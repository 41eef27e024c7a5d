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

from sandfs.plan.draws import below, digest_words, key_texts, mixed_words, unit_columns
from sandfs.plan.seeds import purpose_word

POOL_SPANS = 2  # the pool's width, in spans of the longest clip: reuse vs. diversity per window
_CLIP = purpose_word("pool clip")  # what the draws of its clips' places are for


@dataclass(frozen=True, slots=True)
class FramePool:
    key: int  # seed of the pool's randomness (from the dataset, not from any task)
    grid: int  # frames between grid points: the GCD of the sharing tasks' strides
    width_frames: int  # clip starts of one window vary within this many frames
    span_frames: int  # the pool clip: the longest span of the tasks sharing the pool

    def words(self, window: int, names: Sequence[str]) -> np.ndarray:
        """The pool's own digest of each video in a window (`names`: repr(name) of each),
        rows of four words: its anchors, the same for every clip of that window (words 0-1:
        its grid phase and its offset, as a fraction of the valid range), and the key its
        clips' and shared crops' draws are mixed from (words 2-3)."""
        return digest_words(key_texts((self.key, "pool", window), names))

    def starts(self, epoch: int, samples: int, num_frames: np.ndarray, span: int,
               words: np.ndarray) -> np.ndarray:
        """The first frame of the clip of (epoch, sample) spanning `span` frames, for every
        video (rows: `num_frames` >= span each; `words`: theirs, `words`) and sample
        (columns)."""
        grid = self.grid
        phase, offset = unit_columns(words).T
        phase = below(np.int64(grid), phase)
        frames = num_frames.astype(np.int64)[:, None]
        phase = np.where(phase > frames[:, 0] - span, 0, phase)[:, None]
        own_slots = (frames - span - phase) // grid + 1
        pool_slots = (frames - self.span_frames - phase) // grid + 1
        # the pool clip does not fit, or is shorter than the task's: the task's own range
        pool_slots = np.where((pool_slots < 1) | (pool_slots > own_slots), own_slots, pool_slots)
        width = np.minimum(pool_slots, max(1, self.width_frames // grid))
        draws = unit_columns(mixed_words(np.repeat(words[:, 2:], samples, axis=0), _CLIP, epoch,
                                         np.tile(np.arange(samples), len(words)), 2))
        slot_draw = draws[:, 0].reshape(len(words), samples)
        quantile_draw = draws[:, 1].reshape(len(words), samples)
        pool_slot = ((offset[:, None] * pool_slots).astype(np.int64)
                     + below(width, slot_draw)) % pool_slots
        # the same quantile of the task's own range: uniform, and inside the pool clip
        position = (pool_slot + quantile_draw) / pool_slots
        return phase + grid * np.minimum(own_slots - 1,
                                         np.floor(position * own_slots).astype(np.int64))

    @staticmethod
    def crop_units(words: np.ndarray, epoch: int, samples: np.ndarray,
                   context: tuple) -> np.ndarray:
        """Two uniform draws for each clip's place of a crop window shared with other tasks
        (`words`: its video's, `words`; `context`: the window's, `TaskPlan.crop_window`)."""
        return unit_columns(mixed_words(words[:, 2:], purpose_word("crop", context), epoch,
                                        samples, 2))
