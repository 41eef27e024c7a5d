"""The .npy bytes of a view: numpy's own format-1.0 header (byte-identical to `np.save`), whose
length we know before materializing, followed by the C-order data."""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
from numpy.lib import format as npformat


@lru_cache(maxsize=1024)
def npy_header(shape: tuple[int, ...], dtype: str) -> bytes:
    buffer = io.BytesIO()
    header = {"descr": npformat.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
              "shape": tuple(int(n) for n in shape)}
    npformat.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def npy_nbytes(shape: tuple[int, ...], dtype: str) -> int:
    count = int(np.prod(shape, dtype=np.int64))
    return len(npy_header(tuple(shape), dtype)) + count * np.dtype(dtype).itemsize


def npy_bytes(array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array)
    return npy_header(array.shape, array.dtype.str) + array.tobytes()


def npy_buffer(shape: tuple[int, ...], dtype: str) -> tuple[memoryview, np.ndarray]:
    """A whole .npy file in one buffer, and an array view of its data part to fill in place
    (no copy when the object is served). The buffer is not zeroed: `bytearray(n)` would write
    every byte of a 19 MB batch under the GIL (in the trio thread, while decoding threads
    wait); left untouched, its pages are first written by the worker filling them."""
    header = npy_header(tuple(shape), dtype)
    buffer = np.empty(npy_nbytes(shape, dtype), np.uint8)
    buffer[: len(header)] = np.frombuffer(header, np.uint8)
    array = buffer[len(header) :].view(dtype).reshape(shape)
    return memoryview(buffer), array
