"""The .npy bytes of a view: numpy's own format-1.0 header (byte-identical to `np.save`), whose
length we know before materializing, followed by the C-order data."""

from __future__ import annotations

import io
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class NpyBuffer:
    """A whole .npy file in one buffer (`whole`, uint8), and an array view of its data part
    (`array`) to fill in place: no copy when the object is served."""

    whole: np.ndarray
    array: np.ndarray


def npy_buffer(shape: tuple[int, ...], dtype: str, into: np.ndarray | None = None) -> NpyBuffer:
    """The .npy file of an array of `shape` and `dtype`, in `into` (a uint8 buffer of exactly
    its size, whose bytes it overwrites: the header is written again, the data left to fill)
    or in a new one. A new buffer is not zeroed: `bytearray(n)` would write every byte of a
    19 MB batch under the GIL (in the trio thread, while decoding threads wait); left
    untouched, its pages are first written by the worker filling them."""
    header = npy_header(tuple(shape), dtype)
    nbytes = npy_nbytes(shape, dtype)
    if into is not None and into.nbytes != nbytes:
        raise ValueError(f"npy buffer: {into.nbytes} bytes, the array needs {nbytes}")
    whole = np.empty(nbytes, np.uint8) if into is None else into
    whole[: len(header)] = np.frombuffer(header, np.uint8)
    return NpyBuffer(whole, whole[len(header) :].view(dtype).reshape(shape))
