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

import math
from dataclasses import dataclass
from functools import lru_cache

from sandfs.plan.seeds import below, unit_draws

POOL_SPANS = 2  # the pool's width, in spans of the longest clip: reuse vs. diversity per window


@lru_cache(maxsize=1 << 16)
def window_draws(key: int, grid: int, window: int, video: str) -> tuple[int, float]:
    """The pool's own draws for one video in one window: the grid phase and the offset (as a
    fraction of the valid range). Every clip of that window uses them: computed once."""
    phase, offset = unit_draws(key, "pool", window, video)[:2]
    return below(grid, phase), offset


@dataclass(frozen=True, slots=True)
class FramePool:
    key: int  # seed of the pool's randomness (from the dataset, not from any task)
    grid: int  # frames between grid points: the GCD of the sharing tasks' strides
    width_frames: int  # clip starts of one window vary within this many frames
    span_frames: int  # the pool clip: the longest span of the tasks sharing the pool

    def start(self, window: int, video: str, epoch: int, sample: int, num_frames: int,
              span: int) -> int:
        """The first frame of the clip of (epoch, sample) spanning `span` frames
        (num_frames >= span)."""
        phase, offset_fraction = window_draws(self.key, self.grid, window, video)
        if phase > num_frames - span:
            phase = 0
        own_slots = (num_frames - span - phase) // self.grid + 1
        pool_slots = (num_frames - self.span_frames - phase) // self.grid + 1
        if pool_slots < 1 or pool_slots > own_slots:  # the pool clip does not fit or is shorter
            pool_slots = own_slots
        width = min(pool_slots, max(1, self.width_frames // self.grid))
        slot_draw, quantile_draw = unit_draws(self.key, "clip", window, video, epoch, sample)[:2]
        pool_slot = (int(offset_fraction * pool_slots) + below(width, slot_draw)) % pool_slots
        # the same quantile of the task's own range: uniform, and inside the pool clip
        position = (pool_slot + quantile_draw) / pool_slots
        return phase + self.grid * min(own_slots - 1, math.floor(position * own_slots))
