"""`box_blur: {size: K}`: each pixel becomes the mean of the K x K box around it (edges
repeated), per channel; uint8 stays uint8 (rounded half to even), float32 stays float32.

It declares `isolation = "process"`: sandfs runs it in worker processes, so whatever it imports
never loads into the daemon, and a crash or a call longer than `timeout_s` fails only the views
that use it.
"""

from __future__ import annotations

import numpy as np

from sandfs.ops import OpParamError
from sandfs.ops.base import OpType


class BoxBlur(OpType):
    name = "box_blur"
    isolation = "process"
    timeout_s = 10.0

    def validate(self, raw):
        unknown = sorted(set(raw) - {"size"})
        if unknown:
            raise OpParamError(unknown[0], "box_blur takes only size (an odd integer >= 1)")
        size = raw.get("size", 3)
        if not isinstance(size, int) or isinstance(size, bool) or size < 1 or size % 2 == 0:
            raise OpParamError("size", f"expected an odd integer >= 1, got {size!r}")
        return {"size": size}

    def apply(self, params, drawn, frame):
        radius = params["size"] // 2
        padded = np.pad(frame.astype(np.float64), ((radius, radius), (radius, radius), (0, 0)),
                        mode="edge")
        total = np.zeros(frame.shape, np.float64)
        for dy in range(params["size"]):
            for dx in range(params["size"]):
                total += padded[dy:dy + frame.shape[0], dx:dx + frame.shape[1]]
        mean = total / params["size"] ** 2
        if frame.dtype == np.uint8:
            return np.ascontiguousarray(np.clip(np.rint(mean), 0, 255).astype(np.uint8))
        return np.ascontiguousarray(mean.astype(np.float32))
