"""Helpers for the store tests: arrays that look like frames, file listings, keys."""

from __future__ import annotations

import os

import numpy as np

from sandfs.cache import ObjectKey

BLOCK = 4096
SHAPES = {"frame": (24, 32, 3), "aug": (16, 16, 3), "clip": (4, 16, 16, 3),
          "batch": (2, 4, 16, 16, 3)}


def make_array(seed: int, shape: tuple[int, ...], dtype: str = "uint8") -> np.ndarray:
    """Frame-like data: gradients plus a little noise, so codecs have work to do."""
    rng = np.random.default_rng(seed)
    base = np.add.outer(np.arange(shape[0]), np.arange(int(np.prod(shape[1:])))).reshape(shape)
    values = (base + seed * 7 + rng.integers(0, 4, shape)) % 256
    if dtype == "uint8":
        return values.astype(np.uint8)
    return ((values - 114.0) / 57.0).astype(dtype)


def key(kind: str, *parts: object) -> ObjectKey:
    return ObjectKey.of(kind, "test", *parts)


def object_files(root: str) -> list[str]:
    """Every file under the store's objects/ dir (objects and temp files)."""
    found = []
    for dirpath, _, names in os.walk(os.path.join(root, "objects")):
        found += [os.path.join(dirpath, name) for name in names]
    return sorted(found)


def disk_usage(root: str) -> tuple[int, int]:
    """(sum of file sizes, sum of allocated blocks as du counts them) under objects/."""
    apparent = allocated = 0
    for path in object_files(root):
        try:
            status = os.stat(path)
        except FileNotFoundError:  # evicted while we looked
            continue
        apparent += status.st_size
        allocated += status.st_blocks * 512
    return apparent, allocated
