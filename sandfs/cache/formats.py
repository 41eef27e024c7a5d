"""Cache formats: lossless codecs for arrays, and the default choice per object.

Every codec is lossless: `decode(encode(a))` is `a`, bit for bit. A codec turns a C-order array
into a payload; the shape and dtype travel in the object header (see `disk.py`), so a payload
alone never decides how much memory a decode takes.

Measured with `benchmarks/bench_formats.py --float32 --store` on this machine (2 cores; frames
decoded from noisy synthetic H.264; median ms per object; ratio = stored / raw bytes; put/get =
the whole ObjectStore round trip on local disk, header and xxh3 checksum included):

    340x256x3 uint8 frame     encode  decode  ratio    put    get
    raw                         0.01    0.00   1.00   0.26   0.06
    lz4                         0.21    0.05   0.43   0.46   0.09
    zstd (level 1)              0.24    0.06   0.41   0.56   0.12
    png (level 1)               5.66    2.04   0.29   5.34   2.17
    160x120x3 uint8 frame
    raw                         0.00    0.01   1.00   0.13   0.03
    lz4                         0.03    0.02   0.46   0.14   0.04
    zstd                        0.09    0.03   0.46   0.21   0.05
    png                         1.15    0.50   0.32   1.38   0.54
    16x256x340x3 uint8 clip: raw put 1.6 / get 0.7, lz4 4.0 / 1.3 (0.43), png 285 / 32 (0.29)
    340x256x3 float32 (normalized): lz4 1.69 / 0.35 (0.27), zstd 1.64 / 0.98 (0.21)

(Timed by hand on other frames, the ratios were lz4 0.64, zstd 0.51, PNG 0.47: real footage
compresses less than these synthetic frames; the ranking is the same.
docs/performance.md#the-store-and-the-disk.)

The default (`choose_format`), Liquid-style. On 2 cores the CPU is the bottleneck and local disk
reads (~1.7 GB/s) are not, so compression buys capacity, never speed, and pays only while the
budget binds: below the eviction watermark everything is stored raw. Above it, a byte saved keeps
a byte more of objects on disk that would otherwise be recomputed, so a codec pays off when its
extra CPU (one write, one read) is less than the recompute CPU of the bytes it saves. Per MB of
raw array: lz4 costs 0.94 ms and saves 0.57 MB (1.6 ms per MB saved), zstd 1.08 ms for 0.59 MB
(1.8), PNG 29.5 ms for 0.71 MB (42: its write alone costs more than re-decoding the frame).
Recomputing a frame means decoding from its keyframe (~4 frames at 0.55 ms: 8.4 ms per MB), so
frames go lz4; aug frames, clips and batches are re-made from cached frames by augmentation steps
(~0.11 ms per 0.26 MB frame: 0.42 ms per MB), cheaper than any codec, so they stay raw, float or
not. Override per put with `fmt=`. Lossy formats (JPEG, YUV 4:2:0) are left out: views must stay
byte-identical to the reference.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import lz4.block
import numpy as np
import zstandard

KINDS = ("frame", "aug", "clip", "batch")
PNG_LEVEL = 1
ZSTD_LEVEL = 1
_PNG_CHANNELS = (1, 3, 4)


class CodecError(ValueError):
    """A payload that does not decode to the array its header describes."""


@dataclass(frozen=True, slots=True)
class Codec:
    name: str
    code: int  # stored in object headers: never reuse a number
    accepts: Callable[[np.ndarray], bool]
    encode: Callable[[np.ndarray], bytes | memoryview]
    decode: Callable[[memoryview, tuple[int, ...], np.dtype], np.ndarray]


def _contiguous_bytes(array: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(array)).cast("B")


def _raw_decode(payload: memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if len(payload) != _raw_nbytes(shape, dtype):
        raise CodecError(f"raw payload of {len(payload)} bytes for {shape} {dtype}")
    return np.frombuffer(payload, dtype=dtype).reshape(shape)


def _lz4_encode(array: np.ndarray) -> bytes:
    return lz4.block.compress(_contiguous_bytes(array), store_size=False)


def _lz4_decode(payload: memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    raw_nbytes = _raw_nbytes(shape, dtype)
    try:
        data = lz4.block.decompress(payload, uncompressed_size=raw_nbytes, return_bytearray=True)
    except lz4.block.LZ4BlockError as error:
        raise CodecError(f"lz4: {error}") from error
    return _checked_frombuffer(data, shape, dtype)


_zstd_local = threading.local()  # zstandard contexts are not thread-safe: one per thread


def _zstd_compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_zstd_local, "compressor"):
        _zstd_local.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return _zstd_local.compressor


def _zstd_encode(array: np.ndarray) -> bytes:
    return _zstd_compressor().compress(_contiguous_bytes(array))


def _zstd_decode(payload: memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    _zstd_compressor()
    raw_nbytes = _raw_nbytes(shape, dtype)
    try:
        data = _zstd_local.decompressor.decompress(payload, max_output_size=raw_nbytes)
    except zstandard.ZstdError as error:
        raise CodecError(f"zstd: {error}") from error
    return _checked_frombuffer(bytearray(data), shape, dtype)


def _png_accepts(array: np.ndarray) -> bool:
    return array.dtype == np.uint8 and (
        array.ndim == 2 or (array.ndim >= 3 and array.shape[-1] in _PNG_CHANNELS)
    )


def _png_image(array: np.ndarray) -> np.ndarray:
    """A clip (T, H, W, C) or batch becomes one image with its frames stacked vertically."""
    if array.ndim <= 3:
        return array
    return array.reshape(-1, array.shape[-2], array.shape[-1])


def _png_encode(array: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", _png_image(array), [cv2.IMWRITE_PNG_COMPRESSION, PNG_LEVEL])
    if not ok:
        raise CodecError(f"png: OpenCV could not encode {array.shape}")
    return encoded.tobytes()


def _png_decode(payload: memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if image is None or image.dtype != dtype or image.size != int(np.prod(shape)):
        raise CodecError(f"png payload does not decode to {shape} {dtype}")
    return image.reshape(shape)


def _raw_nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _checked_frombuffer(data: bytearray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if len(data) != _raw_nbytes(shape, dtype):
        raise CodecError(f"decoded {len(data)} bytes, expected {shape} {dtype}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _any_array(array: np.ndarray) -> bool:
    return True


CODECS: dict[str, Codec] = {
    codec.name: codec
    for codec in (
        Codec("raw", 0, _any_array, _contiguous_bytes, _raw_decode),
        Codec("lz4", 1, _any_array, _lz4_encode, _lz4_decode),
        Codec("zstd", 2, _any_array, _zstd_encode, _zstd_decode),
        Codec("png", 3, _png_accepts, _png_encode, _png_decode),
    )
}
CODECS_BY_CODE = {codec.code: codec for codec in CODECS.values()}



@dataclass(frozen=True, slots=True)
class CodecCost:
    extra_ms_per_mb: float  # encode + one decode beyond raw, per MB of raw array
    ratio: float  # stored bytes / raw bytes


# measured (see the module docstring), per dtype of the array
CODEC_COSTS: dict[str, dict[str, CodecCost]] = {
    "uint8": {"lz4": CodecCost(0.94, 0.43), "zstd": CodecCost(1.08, 0.41),
              "png": CodecCost(29.5, 0.29)},
    "float32": {"lz4": CodecCost(1.95, 0.27), "zstd": CodecCost(2.5, 0.21)},
}
# CPU to make an object again when it misses, ms per MB of it (derived in the module docstring)
RECOMPUTE_MS_PER_MB = {"frame": 8.4, "aug": 0.42, "clip": 0.42, "batch": 0.42}


def codec_for(fmt: str, array: np.ndarray) -> Codec:
    """The codec named `fmt`, checked against the array (PNG takes uint8 images only)."""
    codec = CODECS.get(fmt)
    if codec is None:
        raise ValueError(f"unknown cache format {fmt!r}; known: {', '.join(CODECS)}")
    if not codec.accepts(array):
        raise ValueError(f"format {fmt!r} cannot store {array.dtype} {array.shape}")
    return codec


def choose_format(kind: str, array: np.ndarray, *, capacity_bound: bool = True) -> str:
    """The default format of an object: raw unless the budget binds; then the codec with the
    least CPU per byte saved, if that CPU is less than recomputing the bytes it saves."""
    if kind not in RECOMPUTE_MS_PER_MB:
        raise ValueError(f"unknown object kind {kind!r}; known: {', '.join(KINDS)}")
    costs = CODEC_COSTS.get(array.dtype.name, {})
    usable = [fmt for fmt in costs if CODECS[fmt].accepts(array)]
    if not capacity_bound or not usable:
        return "raw"
    best = min(usable, key=lambda fmt: costs[fmt].extra_ms_per_mb / (1 - costs[fmt].ratio))
    recompute_ms_saved = RECOMPUTE_MS_PER_MB[kind] * (1 - costs[best].ratio)
    return best if costs[best].extra_ms_per_mb < recompute_ms_saved else "raw"
