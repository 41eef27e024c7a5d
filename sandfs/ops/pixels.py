"""The built-in steps that change pixel values or the clip's frames: color_jitter, grayscale,
gaussian_blur, normalize, to_float, and the temporal inv_sample and temporal_subsample."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from sandfs.ops.base import FrameShape, OpParamError, OpType, Params
from sandfs.ops.checks import (
    HW,
    CoinOp,
    check_keys,
    coin,
    number,
    number_range,
    positive_int,
    probability,
    size_hw,
    triple,
    uniform,
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
            return number_range(key, value, -0.5, 0.5)
        half = number(key, value, 0.0, 0.5)
        return (-half, half)
    if isinstance(value, list | tuple):
        return number_range(key, value, 0.0, math.inf)
    half = number(key, value, 0.0)
    return (max(0.0, 1.0 - half), 1.0 + half)


class ColorJitter(OpType):
    """The four adjustments in an order drawn per clip, each with a factor drawn per clip."""

    name = "color_jitter"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, _JITTER_ORDER)
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
        factors = tuple((key, uniform(rng, params[key])) for key in enabled)
        return (("order", tuple(k for k in order if k in enabled)), *factors)

    def apply(self, params, drawn, frame: np.ndarray):
        out = frame
        for key in drawn.get("order", ()):
            out = _JITTERS[key](out, drawn[key])
        return np.ascontiguousarray(out)


class Grayscale(CoinOp):
    """torchvision RandomGrayscale (Grayscale when p = 1), always 3 output channels."""

    name = "grayscale"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("p",))
        return {"p": probability(raw)}

    def apply(self, params, drawn, frame: np.ndarray):
        if not coin(params, drawn):
            return np.ascontiguousarray(frame)
        return cv2.cvtColor(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)


class GaussianBlur(OpType):
    name = "gaussian_blur"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("kernel_size", "sigma"), required=("kernel_size",))
        sigma = raw.get("sigma", (0.1, 2.0))
        if isinstance(sigma, list | tuple):
            bounds = number_range("sigma", sigma, 0.0, math.inf, True)
        else:
            fixed = number("sigma", sigma, 0.0, low_open=True)
            bounds = (fixed, fixed)
        return {
            "kernel_size": size_hw("kernel_size", raw["kernel_size"], odd=True),
            "sigma": bounds,
        }

    def draws(self, params: Mapping[str, Any]) -> bool:
        low, high = params["sigma"]
        return low < high

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        low, high = params["sigma"]
        return (("sigma", uniform(rng, (low, high))),) if low < high else ()

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
        check_keys(self.name, raw, ("mean", "std"), required=("mean", "std"))
        std = triple("std", raw["std"])
        if min(std) <= 0:
            raise OpParamError("std", f"std must be > 0 for every channel, got {raw['std']!r}")
        return {"mean": triple("mean", raw["mean"]), "std": std}

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
        check_keys(self.name, raw, ())
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
        check_keys(self.name, raw, ())
        return {}

    def frame_order(self, params, drawn, num_frames: int) -> tuple[int, ...]:
        return tuple(range(num_frames - 1, -1, -1))


class TemporalSubsample(_TemporalOp):
    """pytorchvideo's uniform_temporal_subsample: floor(linspace(0, T - 1, num_samples)),
    computed exactly in integers (torch's float32 linspace can land 1 ulp under an integer)."""

    name = "temporal_subsample"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("num_samples",), required=("num_samples",))
        return {"num_samples": positive_int("num_samples", raw["num_samples"])}

    def output_frames(self, params: Mapping[str, Any], num_frames: int) -> int:
        return params["num_samples"]

    def frame_order(self, params, drawn, num_frames: int) -> tuple[int, ...]:
        count = params["num_samples"]
        if count == 1:
            return (0,)
        return tuple(i * (num_frames - 1) // (count - 1) for i in range(count))
