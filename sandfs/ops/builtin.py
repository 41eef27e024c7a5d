"""The built-in augmentation steps of a task config, on HWC numpy frames with 3 channels.

Parameters follow torchvision's transforms; sizes are [H, W] (an int means square).

| step                | parameters (defaults)                                                  |
|---------------------|------------------------------------------------------------------------|
| resize              | shape: [H, W] exact, or size: N (smaller edge to N, aspect kept, as     |
|                     | torchvision; size: [H, W] means shape), interpolation (bilinear)        |
| random_short_side_  | min_size, max_size, interpolation (bilinear): the shorter side to a     |
| scale               | size drawn per clip in [min_size, max_size], aspect kept (PySlowFast's  |
|                     | random_short_side_scale_jitter); a fixed-size crop must follow          |
| random_crop         | size                                                                   |
| center_crop         | size                                                                   |
| random_resized_crop | size, scale ([0.08, 1.0]), ratio ([3/4, 4/3]), interpolation (bilinear)|
| flip                | direction (horizontal | vertical), p (1.0: drawn per clip when < 1)    |
| rotate              | degrees (d: [-d, d], or [min, max]), interpolation (nearest); fill 0   |
| color_jitter        | brightness, contrast, saturation (0), hue (0, at most 0.5): v means     |
|                     | [max(0, 1-v), 1+v] ([-v, v] for hue), or give [min, max]; uint8 only  |
| grayscale           | p (1.0); 3 output channels                                             |
| gaussian_blur       | kernel_size (odd int or [kh, kw]), sigma ([0.1, 2.0], or a number)     |
| normalize           | mean, std (3 numbers each); uint8 input is divided by 255 first        |
| to_float            | none: float32 in [0, 1]                                                |
| inv_sample          | none: the clip reversed in time                                        |
| temporal_subsample  | num_samples: evenly spaced frames, floor(linspace(0, T-1, n))          |

Interpolation is one of nearest, bilinear, bicubic, area. All randomness is drawn once per clip.

Inputs smaller than a crop: random_crop and center_crop first upscale the frame (bilinear), keeping
its aspect ratio, until it covers the crop, then crop; `track` accounts for the upscale, so the
reported crop box stays in source pixels. (torchvision would pad instead; padding would put black
borders into training data.)
"""

from __future__ import annotations

import cv2

from sandfs.ops.base import OpType
from sandfs.ops.geometry import (
    CenterCrop,
    Flip,
    RandomCrop,
    RandomResizedCrop,
    RandomShortSideScale,
    Resize,
    Rotate,
)
from sandfs.ops.pixels import (
    ColorJitter,
    GaussianBlur,
    Grayscale,
    InvSample,
    Normalize,
    TemporalSubsample,
    ToFloat,
)

# OpenCV's own thread pool does not pay here: the daemon already runs one op call per worker
# thread on every core. Measured on the 2-vCPU dev box (a resize + random_resized_crop + flip +
# color_jitter + gaussian_blur pipeline, 16-frame clips, medians of 9 interleaved runs; the box was
# shared, load 2-5, so +-20% noise): with 2 Python worker threads, 1 OpenCV thread gave 1.18x and
# 1.36x the frames/s of OpenCV's default 2 at 224 px, 1.09x and 0.97x at 112 px, and its pool
# never saved CPU per frame; with one caller the pool gave 0.73x-1.04x. Process-wide on purpose.
cv2.setNumThreads(1)

BUILTIN_OPS: tuple[type[OpType], ...] = (
    Resize,
    RandomShortSideScale,
    RandomCrop,
    CenterCrop,
    RandomResizedCrop,
    Flip,
    Rotate,
    ColorJitter,
    Grayscale,
    GaussianBlur,
    Normalize,
    ToFloat,
    InvSample,
    TemporalSubsample,
)
