"""Evaluation views (`sampling.test_views: {clips: T, crops: S}`), as video papers evaluate
(PySlowFast's T clips x S crops): pure index and crop arithmetic, no randomness.

Each video gives T x S clips, numbered `sample = clip * S + crop` (video-major, then clip, then
crop, in batch order). Clip i of T starts at round(i * (num_frames - span) / max(T - 1, 1)),
rounded half up: clip 0 at the first frame, clip T-1 ending on the last, the others evenly
between (T = 1: the start). Crops are taken on the frame the pipeline's crop step sees (after
its small-input upscale): S = 1 the center (center_crop's own rounding), S = 3 the start, the
center and the end of the long side (left / center / right when the frame is at least as wide as
high, else top / center / bottom), centered on the short side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sandfs.config.schema import TestViews
from sandfs.ops.base import OpInstance
from sandfs.ops.geometry import cover_hw


@dataclass(frozen=True, slots=True)
class ViewIndex:
    """Which evaluation view a sample of a video is."""

    clip: int
    crop: int


def view_index(views: TestViews, sample: int) -> ViewIndex:
    return ViewIndex(sample // views.crops, sample % views.crops)


def clip_start(clip: int, clips: int, num_frames: int, span: int) -> int:
    """The first frame of clip `clip` of `clips` (num_frames >= span)."""
    return math.floor(clip * (num_frames - span) / max(clips - 1, 1) + 0.5)


def crop_origin(index: int, crops: int, frame_hw: tuple[int, int],
                crop_hw: tuple[int, int]) -> tuple[int, int]:
    """(y, x) of crop `index` of `crops` in a frame of `frame_hw` (already covering the crop)."""
    (frame_h, frame_w), (crop_h, crop_w) = frame_hw, crop_hw
    center = (round((frame_h - crop_h) / 2.0), round((frame_w - crop_w) / 2.0))
    if crops == 1 or index == 1:
        return center
    if frame_w >= frame_h:
        return (center[0], 0 if index == 0 else frame_w - crop_w)
    return (0 if index == 0 else frame_h - crop_h, center[1])


def fixed_crop(params: tuple, index: int, crops: int, in_hw: tuple[int, int]) -> OpInstance:
    """The crop step of a test_views task, placed: a random_crop instance with a fixed origin
    (pure, so it names cached objects like any drawn crop)."""
    size = dict(params)["size"]
    y, x = crop_origin(index, crops, cover_hw(in_hw, size), size)
    return OpInstance("random_crop", params, (("x", x), ("y", y)))
