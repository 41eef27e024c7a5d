"""What the built-in steps share: parameter checks that raise OpParamError(key, what is allowed,
what was given), the interpolation flags, and the coin of ops applied with probability p."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from sandfs.ops.base import OpParamError, OpType, Params

INTERPOLATIONS = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "area": cv2.INTER_AREA,
}

HW = tuple[int, int]


def check_keys(op: str, raw: Mapping[str, Any], allowed: Sequence[str], required=()) -> None:
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


def number(key: str, value: Any, low=-math.inf, high=math.inf, low_open=False) -> float:
    above = _is_number(value) and (value > low if low_open else value >= low)
    if not (above and value <= high):
        raise OpParamError(
            key, f"{key} must be a number {_bounds_text(low, high, low_open)}, got {value!r}"
        )
    return float(value)


def number_range(key: str, value: Any, low: float, high: float, low_open=False) -> tuple:
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


def positive_int(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise OpParamError(key, f"{key} must be a positive int, got {value!r}")
    return value


def size_hw(key: str, value: Any, odd=False) -> HW:
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


def choice(key: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise OpParamError(key, f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def interpolation_name(raw: Mapping[str, Any], default: str) -> str:
    return choice("interpolation", raw.get("interpolation", default), list(INTERPOLATIONS))


def triple(key: str, value: Any) -> tuple[float, float, float]:
    if not (isinstance(value, list | tuple) and len(value) == 3 and all(map(_is_number, value))):
        raise OpParamError(key, f"{key} must be 3 numbers (one per RGB channel), got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


# --- the coin of ops applied to a clip with probability p ---


def probability(raw: Mapping[str, Any]) -> float:
    return number("p", raw.get("p", 1.0), 0.0, 1.0)


def draw_coin(params, rng: np.random.Generator) -> Params:
    """p < 1: whether this clip gets the op; p in {0, 1} draws nothing."""
    if 0.0 < params["p"] < 1.0:
        return (("apply", bool(rng.random() < params["p"])),)
    return ()


class CoinOp(OpType):
    """An op applied to a clip with probability `p`: random only when 0 < p < 1."""

    random = True

    def draws(self, params: Mapping[str, Any]) -> bool:
        return 0.0 < params["p"] < 1.0

    def draw(self, params, rng: np.random.Generator, in_hw: HW) -> Params:
        return draw_coin(params, rng)


def coin(params, drawn) -> bool:
    return drawn.get("apply", params["p"] >= 1.0)
