"""The records a plan hands out: a clip of one stream with all its randomness resolved, and a
view (a batch) of them. What a stream path makes the same for many clips (its step depths,
branch records and decoding) is one shared `ClipPath`, not three fields of every clip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sandfs.npy import npy_nbytes
from sandfs.ops.base import OpInstance


@dataclass(frozen=True, slots=True)
class ClipPath:
    step_depths: tuple[int, ...]  # len(ops) after each DAG entry of the path (for aug{D})
    branches: tuple[tuple[str, str], ...]  # (step name, branch taken)
    source: tuple | None = None  # how frames are decoded: None full size, or decode_resize


class StreamClip(NamedTuple):
    """One clip of one stream in a batch, with all randomness resolved: a tuple, so that one
    made from a window's columns (`cliptable.py`) costs little."""

    video_index: int
    sample: int
    stream: int
    frame_indices: tuple[int, ...]  # decoded frame indices, in the clip's output order
    ops: tuple[OpInstance, ...]  # the spatial ops applied to every frame, in order
    path: ClipPath

    @property
    def step_depths(self) -> tuple[int, ...]:
        return self.path.step_depths

    @property
    def branches(self) -> tuple[tuple[str, str], ...]:
        return self.path.branches

    @property
    def source(self) -> tuple | None:
        return self.path.source


@dataclass(frozen=True, slots=True)
class ViewPlan:
    task: str
    epoch: int
    iteration: int
    # a tuple or `TableClips`; batch order: stream-major, then video, then sample
    clips: Sequence[StreamClip]
    shape: tuple[int, ...]
    dtype: str
    layout: str

    @property
    def nbytes(self) -> int:
        return npy_nbytes(self.shape, self.dtype)
