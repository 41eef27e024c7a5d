"""Custom steps for the out-of-process tests: importable by module and name, as the worker
processes import them. `register()` adds them to this process's registry."""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from sandfs.ops import OpParamError, get_op, register_op
from sandfs.ops.base import OpType


class Gamma(OpType):
    """out = 255 * (in / 255) ** gamma, through a lookup table (uint8)."""

    name = "test_gamma"
    isolation = "process"
    timeout_s = 20.0

    def validate(self, raw):
        unknown = set(raw) - {"gamma"}
        if unknown:
            raise OpParamError(sorted(unknown)[0], "test_gamma takes only gamma")
        return {"gamma": float(raw.get("gamma", 0.5))}

    def apply(self, params, drawn, frame):
        table = np.round(255.0 * (np.arange(256) / 255.0) ** params["gamma"]).astype(np.uint8)
        return table[frame]


class Misbehave(OpType):
    """Fails the way it is told to: segfault, exit, raise, hang, shape (or not at all: ok)."""

    name = "test_misbehave"
    isolation = "process"
    timeout_s = 1.5

    def validate(self, raw):
        return {"how": raw.get("how", "ok")}

    def apply(self, params, drawn, frame):
        how = params["how"]
        if how == "segfault":
            ctypes.string_at(0)
        elif how == "exit":
            os._exit(3)
        elif how == "raise":
            raise ValueError("told to raise")
        elif how == "hang":
            time.sleep(600)
        elif how == "shape":  # not what output_shape declares
            return np.ascontiguousarray(frame[:2])
        return frame


def register() -> None:
    for op_type in (Gamma, Misbehave):
        try:
            get_op(op_type.name)
        except KeyError:
            register_op(op_type)
