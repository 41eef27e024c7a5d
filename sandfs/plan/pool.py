"""The shared frame pool (SAND §5.2, temporal randomness).

For each (video, k-epoch window) the pool fixes a frame grid (the GCD of the strides of all
tasks reading the dataset, with a random phase) and a random *offset*; every clip of the window
— any task, any epoch, any sample — then starts at `offset + u` grid slots, where `u` is drawn by
the task from its own seed within the pool's width. Clips of one window therefore overlap, so one
decode pass serves them all, while each clip start stays uniformly distributed over the valid
range: the offset is uniform and the sum wraps around modulo the number of valid slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sandfs.plan.seeds import rng_for

POOL_SPANS = 2  # the pool's width, in spans of the longest clip: reuse vs. diversity per window


@lru_cache(maxsize=1 << 16)
def window_draws(key: int, grid: int, window: int, video: str) -> tuple[int, float]:
    """The pool's own draws for one video in one window: the grid phase and the offset (as a
    fraction of the valid range). Every clip of that window uses them: computed once."""
    phase = int(rng_for(key, "phase", window, video).integers(grid))
    return phase, float(rng_for(key, "offset", window, video).random())


@dataclass(frozen=True, slots=True)
class FramePool:
    key: int  # seed of the pool's randomness (from the dataset, not from any task)
    grid: int  # frames between grid points: the GCD of the sharing tasks' strides
    width_frames: int  # clip starts of one window vary within this many frames

    def start(self, window: int, video: str, num_frames: int, span: int,
              task_rng: np.random.Generator) -> int:
        """The first frame of a clip spanning `span` frames (num_frames >= span)."""
        max_start = num_frames - span
        phase, offset_fraction = window_draws(self.key, self.grid, window, video)
        if phase > max_start:
            phase = 0
        slots = (max_start - phase) // self.grid + 1
        offset = int(offset_fraction * slots)
        width = min(slots, max(1, self.width_frames // self.grid))
        slot = (offset + int(task_rng.integers(width))) % slots
        return phase + self.grid * slot
