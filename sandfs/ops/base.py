"""The augmentation-op interface. Every step declares its output shape before anything runs, and
all randomness is drawn by the planner (`draw`) so that applying an op is a pure function.

A custom op subclasses `OpType` and is registered with `sandfs.ops.register_op` (see README).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

Params = tuple[tuple[str, Any], ...]  # sorted (key, value) pairs, values hashable (tuples)


class OpParamError(ValueError):
    """A bad op parameter. `key` is the parameter name ('' for the op as a whole)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


@dataclass(frozen=True, slots=True)
class FrameShape:
    """Static shape of one frame flowing through the pipeline; None = depends on the video."""

    height: int | None
    width: int | None
    dtype: str = "uint8"  # "uint8" | "float32"


@dataclass(frozen=True, slots=True)
class Window:
    """Where the current image lies in the source frame, in source pixels (float), so that a crop
    can be reported in source coordinates of the unflipped image."""

    x: float
    y: float
    w: float
    h: float
    flipped: bool = False  # mirrored left-right relative to the source
    cropped: bool = False
    vflipped: bool = False  # mirrored top-bottom relative to the source


@dataclass(frozen=True, slots=True)
class OpInstance:
    """One op with its randomness resolved for one clip: hashable, so it names cached objects."""

    name: str
    params: Params
    drawn: Params = ()


class OpType:
    """Base class of an augmentation op. Subclasses set `name` and override what they need."""

    name: ClassVar[str]
    random: ClassVar[bool] = False  # draws something per clip
    temporal: ClassVar[bool] = False  # acts on the clip's time axis, not on pixels
    # "process": applied in a pool of worker processes (isolated.py), failing only its views
    # when it crashes or runs past `timeout_s` seconds per call; "thread": in the daemon
    isolation: ClassVar[str] = "thread"
    timeout_s: ClassVar[float] = 30.0

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Check and normalize the config's parameters; raise OpParamError(key, message)."""
        raise NotImplementedError

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        """The frame shape after this op (static; None dims stay unknown)."""
        return shape

    def drawn_shape(self, params: Mapping[str, Any], drawn: Mapping[str, Any],
                    shape: FrameShape) -> FrameShape:
        """The frame shape after this op as drawn for one clip (a random op whose output size
        is drawn knows it only then). Default: `output_shape`."""
        return self.output_shape(params, shape)

    def output_frames(self, params: Mapping[str, Any], num_frames: int) -> int:
        """Clip length after this op (temporal ops change it)."""
        return num_frames

    def frame_order(
        self, params: Mapping[str, Any], drawn: Mapping[str, Any], num_frames: int
    ) -> tuple[int, ...]:
        """Which input frames make up the output clip, in order (temporal ops override)."""
        return tuple(range(num_frames))

    def draw(
        self, params: Mapping[str, Any], rng: np.random.Generator, in_hw: tuple[int, int]
    ) -> Params:
        """Resolve this op's randomness for one clip whose frames are `in_hw` = (H, W)."""
        return ()

    def draws(self, params: Mapping[str, Any]) -> bool:
        """Whether these parameters draw anything per clip (flip with p 1.0 does not)."""
        return self.random

    def apply(self, params: Mapping[str, Any], drawn: Mapping[str, Any], frame: np.ndarray):
        """Apply to one HWC frame (uint8 or float32); must not modify `frame` in place."""
        raise NotImplementedError

    def apply_clip(
        self, params: Mapping[str, Any], drawn: Mapping[str, Any], clip: list[np.ndarray]
    ) -> list[np.ndarray]:
        """Apply to a whole clip; spatial ops map `apply`, temporal ops reorder/select frames."""
        return [self.apply(params, drawn, f) for f in clip]

    def track(
        self,
        params: Mapping[str, Any],
        drawn: Mapping[str, Any],
        window: Window,
        in_hw: tuple[int, int],
    ) -> Window:
        """Map the image window through this op (for crop metadata). Default: unchanged."""
        return window
