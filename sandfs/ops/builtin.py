"""The built-in augmentation steps of a task config, on HWC numpy frames with 3 channels.

Parameters follow torchvision's transforms; sizes are [H, W] (an int means square).

| step                | parameters (defaults)                                                  |
|---------------------|------------------------------------------------------------------------|
| resize              | shape: [H, W] exact, or size: N (smaller edge to N, aspect kept, as     |
|                     | torchvision; size: [H, W] means shape), interpolation (bilinear)        |
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from sandfs.ops.base import FrameShape, OpParamError, OpType, Params, Window

# OpenCV's own thread pool does not pay here: the daemon already runs one op call per worker
# thread on every core. Measured on the 2-vCPU dev box (a resize + random_resized_crop + flip +
# color_jitter + gaussian_blur pipeline, 16-frame clips, medians of 9 interleaved runs; the box was
# shared, load 2-5, so +-20% noise): with 2 Python worker threads, 1 OpenCV thread gave 1.18x and
# 1.36x the frames/s of OpenCV's default 2 at 224 px, 1.09x and 0.97x at 112 px, and its pool
# never saved CPU per frame; with one caller the pool gave 0.73x-1.04x. Process-wide on purpose.
cv2.setNumThreads(1)

INTERPOLATIONS = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "area": cv2.INTER_AREA,
}

HW = tuple[int, int]


# --- parameter checks: each raises OpParamError(key, what is allowed, what was given) ---


def _check_keys(op: str, raw: Mapping[str, Any], allowed: Sequence[str], required=()) -> None:
    for key in raw:
        if key not in allowed:
            names = ", ".join(allowed) or "none"
            raise OpParamError(str(key), f"{op} has no parameter {key!r}; allowed: {names}")
    for key in required:
        if key not in raw:
            raise OpParamError(key, f"{op} needs {key!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bounds_text(low: float, high: float, low_open: bool) -> str:
    if high == math.inf:
        return f"> {low:g}" if low_open else f">= {low:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}]"


def _number(key: str, value: Any, low=-math.inf, high=math.inf, low_open=False) -> float:
    above = _is_number(value) and (value > low if low_open else value >= low)
    if not (above and value <= high):
        raise OpParamError(
            key, f"{key} must be a number {_bounds_text(low, high, low_open)}, got {value!r}"
        )
    return float(value)


def _number_range(key: str, value: Any, low: float, high: float, low_open=False) -> tuple:
    """[min, max] with low <= min <= max <= high."""
    ok = isinstance(value, list | tuple) and len(value) == 2 and all(map(_is_number, value))
    if ok:
        lo, hi = value
        ok = (lo > low if low_open else lo >= low) and lo <= hi <= high
    if not ok:
        raise OpParamError(
            key,
            f"{key} must be [min, max] with min <= max, both "
            f"{_bounds_text(low, high, low_open)}, got {value!r}",
        )
    return (float(value[0]), float(value[1]))


def _positive_int(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise OpParamError(key, f"{key} must be a positive int, got {value!r}")
    return value


def _size_hw(key: str, value: Any, odd=False) -> HW:
    """An int (square) or [H, W] of positive ints (odd ones for kernels)."""
    items = value if isinstance(value, list | tuple) else [value, value]
    ok = len(items) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 and (v % 2 or not odd)
        for v in items
    )
    if not ok:
        kind = "odd positive int" if odd else "positive int"
        raise OpParamError(key, f"{key} must be a {kind} or [H, W] of {kind}s, got {value!r}")
    return (items[0], items[1])


def _choice(key: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise OpParamError(key, f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _interpolation(raw: Mapping[str, Any], default: str) -> str:
    return _choice("interpolation", raw.get("interpolation", default), list(INTERPOLATIONS))


def _triple(key: str, value: Any) -> tuple[float, float, float]:
    if not (isinstance(value, list | tuple) and len(value) == 3 and all(map(_is_number, value))):
        raise OpParamError(key, f"{key} must be 3 numbers (one per RGB channel), got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


# --- geometry shared by the crops ---


def cover_hw(in_hw: HW, crop_hw: HW) -> HW:
    """The frame size after the small-input upscale: aspect kept, covering the crop."""
    (in_h, in_w), (crop_h, crop_w) = in_hw, crop_hw
    if in_h >= crop_h and in_w >= crop_w:
        return in_hw
    scale = max(crop_h / in_h, crop_w / in_w)
    return (max(crop_h, round(in_h * scale)), max(crop_w, round(in_w * scale)))


def _crop_window(window: Window, in_hw: HW, box_xywh: tuple[int, int, int, int]) -> Window:
    """The sub-window of `window` (an image of `in_hw`) that the crop `box_xywh` keeps."""
    (in_h, in_w), (x, y, w, h) = in_hw, box_xywh
    x_scale, y_scale = window.w / in_w, window.h / in_h
    if window.flipped:  # a box in a mirrored image lies mirrored in the source
        x = in_w - x - w
    if window.vflipped:
        y = in_h - y - h
    return replace(
        window,
        x=window.x + x * x_scale,
        y=window.y + y * y_scale,
        w=w * x_scale,
        h=h * y_scale,
        cropped=True,
    )


def _frame_hw(frame: np.ndarray) -> HW:
    return (frame.shape[0], frame.shape[1])


class _FixedCrop(OpType):
    """random_crop / center_crop: a `size` crop at an origin, after the small-input upscale."""

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("size",), required=("size",))
        return {"size": _size_hw("size", raw["size"])}

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        crop_h, crop_w = params["size"]
        return replace(shape, height=crop_h, width=crop_w)

    def origin_yx(self, params: Mapping[str, Any], drawn: Mapping[str, Any], cover_hw: HW) -> HW:
        raise NotImplementedError

    def apply(self, params: Mapping[str, Any], drawn: Mapping[str, Any], frame: np.ndarray):
        crop_h, crop_w = params["size"]
        cover_h, cover_w = cover_hw(_frame_hw(frame), params["size"])
        if (cover_h, cover_w) != _frame_hw(frame):
            frame = cv2.resize(frame, (cover_w, cover_h), interpolation=cv2.INTER_LINEAR)
        y, x = self.origin_yx(params, drawn, (cover_h, cover_w))
        if y + crop_h > cover_h or x + crop_w > cover_w:
            raise ValueError(
                f"{self.name}: origin {(y, x)} was drawn for a larger frame than "
                f"{(cover_h, cover_w)}"
            )
        return np.ascontiguousarray(frame[y : y + crop_h, x : x + crop_w])

    def track(self, params, drawn, window: Window, in_hw: HW) -> Window:
        cover = cover_hw(in_hw, params["size"])
        y, x = self.origin_yx(params, drawn, cover)
        crop_h, crop_w = params["size"]
        return _crop_window(window, cover, (x, y, crop_w, crop_h))


class RandomCrop(_FixedCrop):
    name = "random_crop"
    random = True

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        (cover_h, cover_w), (crop_h, crop_w) = cover_hw(in_hw, params["size"]), params["size"]
        y = int(rng.integers(0, cover_h - crop_h + 1))
        x = int(rng.integers(0, cover_w - crop_w + 1))
        return (("x", x), ("y", y))

    def origin_yx(self, params, drawn, cover_hw: HW) -> HW:
        return (drawn["y"], drawn["x"])


class CenterCrop(_FixedCrop):
    name = "center_crop"

    def origin_yx(self, params, drawn, cover_hw: HW) -> HW:
        (cover_h, cover_w), (crop_h, crop_w) = cover_hw, params["size"]
        # torchvision's rounding (Python round: half to even)
        return (round((cover_h - crop_h) / 2.0), round((cover_w - crop_w) / 2.0))


class Resize(OpType):
    name = "resize"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("shape", "size", "interpolation"))
        if ("shape" in raw) == ("size" in raw):
            raise OpParamError(
                "shape",
                "resize needs exactly one of shape: [H, W] (exact size) "
                "or size: N (smaller edge to N, aspect kept)",
            )
        interpolation = _interpolation(raw, "bilinear")
        if "size" in raw and not isinstance(raw["size"], list | tuple):
            return {"size": _positive_int("size", raw["size"]), "interpolation": interpolation}
        key = "shape" if "shape" in raw else "size"  # size: [H, W] is an exact size
        return {"shape": _size_hw(key, raw[key]), "interpolation": interpolation}

    @staticmethod
    def out_hw(params: Mapping[str, Any], in_hw: HW) -> HW:
        if "shape" in params:
            return tuple(params["shape"])
        # torchvision: the smaller edge becomes `size`, the longer one int(size * long / short)
        (in_h, in_w), size = in_hw, params["size"]
        if in_w <= in_h:
            return (int(size * in_h / in_w), size)
        return (size, int(size * in_w / in_h))

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        if "shape" not in params and (shape.height is None or shape.width is None):
            return replace(shape, height=None, width=None)
        out_h, out_w = self.out_hw(params, (shape.height, shape.width))
        return replace(shape, height=out_h, width=out_w)

    def apply(self, params, drawn, frame: np.ndarray):
        out_h, out_w = self.out_hw(params, _frame_hw(frame))
        if (out_h, out_w) == _frame_hw(frame):
            return np.ascontiguousarray(frame)
        flag = INTERPOLATIONS[params["interpolation"]]
        return cv2.resize(frame, (out_w, out_h), interpolation=flag)

    # track: the window is unchanged, only its pixel scale (derived from in_hw) changes


class RandomResizedCrop(OpType):
    name = "random_resized_crop"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("size", "scale", "ratio", "interpolation"), required=("size",))
        return {
            "size": _size_hw("size", raw["size"]),
            "scale": _number_range("scale", raw.get("scale", (0.08, 1.0)), 0.0, 1.0, True),
            "ratio": _number_range("ratio", raw.get("ratio", (3 / 4, 4 / 3)), 0.0, math.inf, True),
            "interpolation": _interpolation(raw, "bilinear"),
        }

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        out_h, out_w = params["size"]
        return replace(shape, height=out_h, width=out_w)

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        """torchvision's RandomResizedCrop.get_params, on numpy's rng."""
        in_h, in_w = in_hw
        area = in_h * in_w
        log_ratio = (math.log(params["ratio"][0]), math.log(params["ratio"][1]))
        for _ in range(10):
            target_area = area * _uniform(rng, params["scale"])
            aspect = math.exp(_uniform(rng, log_ratio))
            w = round(math.sqrt(target_area * aspect))
            h = round(math.sqrt(target_area / aspect))
            if 0 < w <= in_w and 0 < h <= in_h:
                y = int(rng.integers(0, in_h - h + 1))
                x = int(rng.integers(0, in_w - w + 1))
                return (("h", h), ("w", w), ("x", x), ("y", y))
        return self._fallback(params, in_hw)

    @staticmethod
    def _fallback(params, in_hw: HW) -> Params:
        """After 10 misses: a central crop with the ratio clamped into range."""
        (in_h, in_w), (min_ratio, max_ratio) = in_hw, params["ratio"]
        h, w = in_h, in_w
        if in_w / in_h < min_ratio:
            h = round(in_w / min_ratio)
        elif in_w / in_h > max_ratio:
            w = round(in_h * max_ratio)
        return (("h", h), ("w", w), ("x", (in_w - w) // 2), ("y", (in_h - h) // 2))

    def apply(self, params, drawn, frame: np.ndarray):
        x, y, w, h = drawn["x"], drawn["y"], drawn["w"], drawn["h"]
        out_h, out_w = params["size"]
        flag = INTERPOLATIONS[params["interpolation"]]
        return cv2.resize(frame[y : y + h, x : x + w], (out_w, out_h), interpolation=flag)

    def track(self, params, drawn, window: Window, in_hw: HW) -> Window:
        return _crop_window(window, in_hw, (drawn["x"], drawn["y"], drawn["w"], drawn["h"]))


def _probability(raw: Mapping[str, Any]) -> float:
    return _number("p", raw.get("p", 1.0), 0.0, 1.0)


def _draw_coin(params, rng: np.random.Generator) -> Params:
    """p < 1: whether this clip gets the op; p in {0, 1} draws nothing."""
    if 0.0 < params["p"] < 1.0:
        return (("apply", bool(rng.random() < params["p"])),)
    return ()


class _CoinOp(OpType):
    """An op applied to a clip with probability `p`: random only when 0 < p < 1."""

    random = True

    def draws(self, params: Mapping[str, Any]) -> bool:
        return 0.0 < params["p"] < 1.0

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        return _draw_coin(params, rng)


def _coin(params, drawn) -> bool:
    return drawn.get("apply", params["p"] >= 1.0)


class Flip(_CoinOp):
    name = "flip"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("direction", "p"))
        direction = _choice(
            "direction", raw.get("direction", "horizontal"), ("horizontal", "vertical")
        )
        return {"direction": direction, "p": _probability(raw)}

    def apply(self, params, drawn, frame: np.ndarray):
        if not _coin(params, drawn):
            return np.ascontiguousarray(frame)
        return cv2.flip(frame, 1 if params["direction"] == "horizontal" else 0)

    def track(self, params, drawn, window: Window, in_hw: HW) -> Window:
        if not _coin(params, drawn):
            return window
        if params["direction"] == "horizontal":
            return replace(window, flipped=not window.flipped)
        return replace(window, vflipped=not window.vflipped)


class Rotate(OpType):
    """torchvision RandomRotation (expand=False, center=None, fill=0). `track` keeps the window:
    the reported crop box is that of the unrotated region, not exact after a rotation."""

    name = "rotate"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("degrees", "interpolation"), required=("degrees",))
        degrees = raw["degrees"]
        if isinstance(degrees, list | tuple):
            bounds = _number_range("degrees", degrees, -math.inf, math.inf)
        else:
            half = _number("degrees", degrees, 0.0)
            bounds = (-half, half)
        return {"degrees": bounds, "interpolation": _interpolation(raw, "nearest")}

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        low, high = params["degrees"]
        return (("angle", _uniform(rng, (low, high))),) if low < high else ()

    def apply(self, params, drawn, frame: np.ndarray):
        angle_degrees = drawn.get("angle", params["degrees"][0])
        h, w = _frame_hw(frame)
        # counter-clockwise about the image centre, as torchvision
        matrix = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), angle_degrees, 1.0)
        return cv2.warpAffine(
            frame,
            matrix,
            (w, h),
            flags=INTERPOLATIONS[params["interpolation"]],
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(0, 0, 0),
        )


# --- color_jitter: torchvision's tensor formulas on uint8, via lookup tables where per-pixel ---

_FLOAT_LEVELS = np.arange(256, dtype=np.float32)
_UINT8_LEVELS = np.arange(256, dtype=np.uint8)
_GRAY_WEIGHTS_RGB = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale


def _lut_blend(frame: np.ndarray, factor: float, other: float) -> np.ndarray:
    """factor * frame + (1 - factor) * other, clamped and truncated as torchvision's _blend."""
    lut = np.clip(_FLOAT_LEVELS * factor + (1.0 - factor) * other, 0, 255).astype(np.uint8)
    return cv2.LUT(frame, lut)


def _brightness(frame: np.ndarray, factor: float) -> np.ndarray:
    return _lut_blend(frame, factor, 0.0)


def _contrast(frame: np.ndarray, factor: float) -> np.ndarray:
    # torchvision blends with the mean of the grayscale image (here from channel means: the
    # per-pixel truncation it does first moves the mean by < 1 level)
    mean_gray = float(np.dot(cv2.mean(frame)[:3], _GRAY_WEIGHTS_RGB))
    return _lut_blend(frame, factor, mean_gray)


def _saturation(frame: np.ndarray, factor: float) -> np.ndarray:
    # blend with the pixel's gray (OpenCV's weights and rounding: within a level of torchvision)
    gray = cv2.cvtColor(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)
    return cv2.addWeighted(frame, factor, gray, 1.0 - factor, 0.0)


def _hue(frame: np.ndarray, factor: float) -> np.ndarray:
    # uint8 HSV, hue over the full range: OpenCV reads it as h * 360 / 256 but writes it back as
    # h * 360 / 255, so the table both shifts the hue and converts between the two scales
    hsv = cv2.cvtColor(frame, cv2.COLOR_RGB2HSV_FULL)
    hue_lut = np.round((np.arange(256) + round(factor * 256)) % 256 * (255 / 256))
    lut = np.stack([hue_lut.astype(np.uint8), _UINT8_LEVELS, _UINT8_LEVELS], axis=-1)
    return cv2.cvtColor(cv2.LUT(hsv, lut.reshape(256, 1, 3)), cv2.COLOR_HSV2RGB_FULL)


_JITTERS = {
    "brightness": _brightness,
    "contrast": _contrast,
    "saturation": _saturation,
    "hue": _hue,
}
_JITTER_ORDER = ("brightness", "contrast", "saturation", "hue")  # torchvision's draw order


def _jitter_bounds(key: str, value: Any) -> tuple[float, float]:
    """torchvision ColorJitter._check_input: v -> [max(0, 1 - v), 1 + v] ([-v, v] for hue)."""
    if key == "hue":
        if isinstance(value, list | tuple):
            return _number_range(key, value, -0.5, 0.5)
        half = _number(key, value, 0.0, 0.5)
        return (-half, half)
    if isinstance(value, list | tuple):
        return _number_range(key, value, 0.0, math.inf)
    half = _number(key, value, 0.0)
    return (max(0.0, 1.0 - half), 1.0 + half)


class ColorJitter(OpType):
    """The four adjustments in an order drawn per clip, each with a factor drawn per clip."""

    name = "color_jitter"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, _JITTER_ORDER)
        return {key: _jitter_bounds(key, raw.get(key, 0)) for key in _JITTER_ORDER}

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        if shape.dtype != "uint8":
            raise OpParamError(
                "", "color_jitter needs uint8 frames: put it before to_float/normalize"
            )
        return shape

    @staticmethod
    def _enabled(params) -> list[str]:
        neutral = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}
        return [k for k in _JITTER_ORDER if params[k] != (neutral[k], neutral[k])]

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        order = [_JITTER_ORDER[i] for i in rng.permutation(4)]
        enabled = self._enabled(params)
        factors = tuple((key, _uniform(rng, params[key])) for key in enabled)
        return (("order", tuple(k for k in order if k in enabled)), *factors)

    def apply(self, params, drawn, frame: np.ndarray):
        out = frame
        for key in drawn.get("order", ()):
            out = _JITTERS[key](out, drawn[key])
        return np.ascontiguousarray(out)


class Grayscale(_CoinOp):
    """torchvision RandomGrayscale (Grayscale when p = 1), always 3 output channels."""

    name = "grayscale"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("p",))
        return {"p": _probability(raw)}

    def apply(self, params, drawn, frame: np.ndarray):
        if not _coin(params, drawn):
            return np.ascontiguousarray(frame)
        return cv2.cvtColor(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)


class GaussianBlur(OpType):
    name = "gaussian_blur"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("kernel_size", "sigma"), required=("kernel_size",))
        sigma = raw.get("sigma", (0.1, 2.0))
        if isinstance(sigma, list | tuple):
            bounds = _number_range("sigma", sigma, 0.0, math.inf, True)
        else:
            fixed = _number("sigma", sigma, 0.0, low_open=True)
            bounds = (fixed, fixed)
        return {
            "kernel_size": _size_hw("kernel_size", raw["kernel_size"], odd=True),
            "sigma": bounds,
        }

    def draws(self, params: Mapping[str, Any]) -> bool:
        low, high = params["sigma"]
        return low < high

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        low, high = params["sigma"]
        return (("sigma", _uniform(rng, (low, high))),) if low < high else ()

    def apply(self, params, drawn, frame: np.ndarray):
        sigma = drawn.get("sigma", params["sigma"][0])
        kernel_h, kernel_w = params["kernel_size"]
        # BORDER_REFLECT_101 is torch's "reflect" padding, which torchvision uses
        return cv2.GaussianBlur(
            frame,
            (kernel_w, kernel_h),
            sigmaX=sigma,
            sigmaY=sigma,
            borderType=cv2.BORDER_REFLECT_101,
        )


def _to_unit_float(frame: np.ndarray) -> np.ndarray:
    """uint8 -> float32 v / 255 (bitwise as torchvision's ToTensor); float32 passes through."""
    if frame.dtype == np.uint8:
        return np.divide(frame, np.float32(255), dtype=np.float32)
    return frame


def _cv_scalar(values: tuple[float, float, float], pad: float) -> tuple[float, ...]:
    """Per-channel constants for cv2 arithmetic, rounded to float32 as numpy/torch would use."""
    return (*(float(v) for v in np.asarray(values, np.float32)), pad)


class Normalize(OpType):
    """(v / 255 - mean) / std per channel on uint8 input, (v - mean) / std on float32 input
    (assumed in [0, 1]); float32 results bitwise equal to torchvision's ToTensor + Normalize."""

    name = "normalize"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("mean", "std"), required=("mean", "std"))
        std = _triple("std", raw["std"])
        if min(std) <= 0:
            raise OpParamError("std", f"std must be > 0 for every channel, got {raw['std']!r}")
        return {"mean": _triple("mean", raw["mean"]), "std": std}

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        return replace(shape, dtype="float32")

    def apply_clip(self, params, drawn, clip: list[np.ndarray]) -> list[np.ndarray]:
        # uint8: one table lookup per pixel (numpy broadcasting over C = 3 is ~10x slower)
        mean, std = np.asarray(params["mean"], np.float32), np.asarray(params["std"], np.float32)
        lut = ((_to_unit_float(_UINT8_LEVELS)[:, None] - mean) / std).reshape(256, 1, 3)
        return [self._normalize(params, lut, frame) for frame in clip]

    @staticmethod
    def _normalize(params, lut: np.ndarray, frame: np.ndarray) -> np.ndarray:
        if frame.dtype == np.uint8:
            return cv2.LUT(frame, lut)
        centred = cv2.subtract(frame, _cv_scalar(params["mean"], 0.0))
        return cv2.divide(centred, _cv_scalar(params["std"], 1.0))

    def apply(self, params, drawn, frame: np.ndarray):
        return self.apply_clip(params, drawn, [frame])[0]


class ToFloat(OpType):
    name = "to_float"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ())
        return {}

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        return replace(shape, dtype="float32")

    def apply(self, params, drawn, frame: np.ndarray):
        return np.ascontiguousarray(_to_unit_float(frame))


class _TemporalOp(OpType):
    temporal = True

    def apply_clip(self, params, drawn, clip: list[np.ndarray]) -> list[np.ndarray]:
        return [clip[i] for i in self.frame_order(params, drawn, len(clip))]


class InvSample(_TemporalOp):
    name = "inv_sample"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ())
        return {}

    def frame_order(self, params, drawn, num_frames: int) -> tuple[int, ...]:
        return tuple(range(num_frames - 1, -1, -1))


class TemporalSubsample(_TemporalOp):
    """pytorchvideo's uniform_temporal_subsample: floor(linspace(0, T - 1, num_samples)),
    computed exactly in integers (torch's float32 linspace can land 1 ulp under an integer)."""

    name = "temporal_subsample"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        _check_keys(self.name, raw, ("num_samples",), required=("num_samples",))
        return {"num_samples": _positive_int("num_samples", raw["num_samples"])}

    def output_frames(self, params: Mapping[str, Any], num_frames: int) -> int:
        return params["num_samples"]

    def frame_order(self, params, drawn, num_frames: int) -> tuple[int, ...]:
        count = params["num_samples"]
        if count == 1:
            return (0,)
        return tuple(i * (num_frames - 1) // (count - 1) for i in range(count))


BUILTIN_OPS: tuple[type[OpType], ...] = (
    Resize,
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
