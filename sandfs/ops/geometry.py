"""The built-in steps that move pixels: resize, random_crop, center_crop, random_resized_crop,
flip and rotate. Each `track`s the image window so that crops are reported in source pixels."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from sandfs.ops.base import FrameShape, OpParamError, OpType, Params, Window
from sandfs.ops.checks import (
    HW,
    INTERPOLATIONS,
    CoinOp,
    check_keys,
    choice,
    coin,
    interpolation_name,
    number,
    number_range,
    positive_int,
    probability,
    size_hw,
    uniform,
)

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
        check_keys(self.name, raw, ("size",), required=("size",))
        return {"size": size_hw("size", raw["size"])}

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
        check_keys(self.name, raw, ("shape", "size", "interpolation"))
        if ("shape" in raw) == ("size" in raw):
            raise OpParamError(
                "shape",
                "resize needs exactly one of shape: [H, W] (exact size) "
                "or size: N (smaller edge to N, aspect kept)",
            )
        interpolation = interpolation_name(raw, "bilinear")
        if "size" in raw and not isinstance(raw["size"], list | tuple):
            return {"size": positive_int("size", raw["size"]), "interpolation": interpolation}
        key = "shape" if "shape" in raw else "size"  # size: [H, W] is an exact size
        return {"shape": size_hw(key, raw[key]), "interpolation": interpolation}

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


class RandomShortSideScale(OpType):
    """PySlowFast's random_short_side_scale_jitter (and pytorchvideo's RandomShortSideScale):
    the shorter side to a size drawn per clip, uniform in [min_size, max_size] and rounded to
    a pixel, the longer one floor(size * long / short): aspect kept. The frame size varies by
    clip, so a fixed-size step (a crop) must follow."""

    name = "random_short_side_scale"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("min_size", "max_size", "interpolation"),
                   required=("min_size", "max_size"))
        low, high = positive_int("min_size", raw["min_size"]), positive_int("max_size",
                                                                            raw["max_size"])
        if low > high:
            raise OpParamError("max_size", f"max_size must be at least min_size ({low}), "
                               f"got {high}")
        return {"min_size": low, "max_size": high,
                "interpolation": interpolation_name(raw, "bilinear")}

    def output_shape(self, params: Mapping[str, Any], shape: FrameShape) -> FrameShape:
        return replace(shape, height=None, width=None)  # drawn per clip

    def drawn_shape(self, params, drawn, shape: FrameShape) -> FrameShape:
        if shape.height is None or shape.width is None:
            return replace(shape, height=None, width=None)
        out_h, out_w = self.out_hw(drawn["size"], (shape.height, shape.width))
        return replace(shape, height=out_h, width=out_w)

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        return (("size", round(uniform(rng, (params["min_size"], params["max_size"])))),)

    @staticmethod
    def out_hw(size: int, in_hw: HW) -> HW:
        in_h, in_w = in_hw
        if in_w < in_h:
            return (math.floor(in_h / in_w * size), size)
        return (size, math.floor(in_w / in_h * size))

    def apply(self, params, drawn, frame: np.ndarray):
        out_h, out_w = self.out_hw(drawn["size"], _frame_hw(frame))
        if (out_h, out_w) == _frame_hw(frame):
            return np.ascontiguousarray(frame)
        flag = INTERPOLATIONS[params["interpolation"]]
        return cv2.resize(frame, (out_w, out_h), interpolation=flag)

    # track: the window is unchanged, only its pixel scale (derived from in_hw) changes


class RandomResizedCrop(OpType):
    name = "random_resized_crop"
    random = True

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("size", "scale", "ratio", "interpolation"), required=("size",))
        return {
            "size": size_hw("size", raw["size"]),
            "scale": number_range("scale", raw.get("scale", (0.08, 1.0)), 0.0, 1.0, True),
            "ratio": number_range("ratio", raw.get("ratio", (3 / 4, 4 / 3)), 0.0, math.inf, True),
            "interpolation": interpolation_name(raw, "bilinear"),
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
            target_area = area * uniform(rng, params["scale"])
            aspect = math.exp(uniform(rng, log_ratio))
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


class Flip(CoinOp):
    name = "flip"

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        check_keys(self.name, raw, ("direction", "p"))
        direction = choice(
            "direction", raw.get("direction", "horizontal"), ("horizontal", "vertical")
        )
        return {"direction": direction, "p": probability(raw)}

    def apply(self, params, drawn, frame: np.ndarray):
        if not coin(params, drawn):
            return np.ascontiguousarray(frame)
        return cv2.flip(frame, 1 if params["direction"] == "horizontal" else 0)

    def track(self, params, drawn, window: Window, in_hw: HW) -> Window:
        if not coin(params, drawn):
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
        check_keys(self.name, raw, ("degrees", "interpolation"), required=("degrees",))
        degrees = raw["degrees"]
        if isinstance(degrees, list | tuple):
            bounds = number_range("degrees", degrees, -math.inf, math.inf)
        else:
            half = number("degrees", degrees, 0.0)
            bounds = (-half, half)
        return {"degrees": bounds, "interpolation": interpolation_name(raw, "nearest")}

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        low, high = params["degrees"]
        return (("angle", uniform(rng, (low, high))),) if low < high else ()

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
