"""The on-disk side of the store: object file format, placement, crash-safe writes, reads that
verify everything before they trust anything.

An object file is

    magic "SANDOBJ" | version u8 | kind u8 | format u8 | ndim u8 | dtype 8s | key digest 32s |
    shape 8 x u64 | payload length u64 | payload xxh3-64 u64 | header xxh3-64 u64 | payload

little-endian, 139 header bytes. The header checksum covers every byte before it; the key in the
header must be the key asked for (a valid object under the wrong name is a miss), and the payload
length must equal the file size less the header, so a corrupt length never sizes an allocation.
Files live at objects/<first 2 hex digits>/<kind>-<digest hex>.obj, named from the digest only.
A write goes to <final name>.<token>.tmp (mode 0600) in the same directory, then is renamed.
"""

from __future__ import annotations

import errno
import itertools
import math
import mmap
import os
import re
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from sandfs.cache.formats import CODECS_BY_CODE, Codec, CodecError
from sandfs.cache.keys import KIND_CODES, KINDS_BY_CODE, ObjectKey
from sandfs.faults import fault_point

MAGIC = b"SANDOBJ"
VERSION = 1
MAX_NDIM = 8
MAX_OBJECT_BYTES = 1 << 36  # a decoded object larger than this is a corrupt header, not data
FAKE_FREE_ENV = "SANDFS_FAKE_FREE_BYTES"
_FIELDS = struct.Struct(f"<{len(MAGIC)}sBBBB8s32s{MAX_NDIM}QQQ")
_CHECKSUM = struct.Struct("<Q")
HEADER_NBYTES = _FIELDS.size + _CHECKSUM.size
_VERSION_OFFSET = len(MAGIC)
_OBJECT_NAME = re.compile(r"^([a-z]+)-([0-9a-f]{64})\.obj$")
_CHUNK_BYTES = 1 << 20
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # one call maps every page, not a fault per page
# dtypes an object may have: plain numbers, native little-endian (no objects, no strings)
DTYPES = frozenset(
    np.dtype(name).str
    for name in ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                 "int64", "float16", "float32", "float64")
)


class CorruptObjectError(Exception):
    """An object file that is not a valid object for its key (truncated, flipped, swapped...)."""


class StaleObjectError(CorruptObjectError):
    """An object file written by another version of the format."""


@dataclass(frozen=True, slots=True)
class Header:
    key: ObjectKey
    codec: Codec
    shape: tuple[int, ...]
    dtype: np.dtype
    payload_nbytes: int
    payload_checksum: int

    @property
    def file_nbytes(self) -> int:
        return HEADER_NBYTES + self.payload_nbytes


def checksum(data: bytes | memoryview | np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(data)


def parts_checksum(parts: Sequence[bytes | memoryview]) -> int:
    """`checksum` of the parts joined (xxh3 streams: the same digest)."""
    state = xxhash.xxh3_64()
    for part in parts:
        state.update(part)
    return state.intdigest()


@dataclass(frozen=True, slots=True)
class Stack:
    """Arrays of one shape and dtype to store as one object, their `np.stack`, without making
    it: stored raw, they are written part by part. (The stacked copy of a run's carried frames,
    ~400 MB of fresh memory, cost 0.36 CPU-s here: docs/performance.md#fresh-pages.)"""

    parts: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a Stack needs at least one array")
        first = self.parts[0]
        if any(p.shape != first.shape or p.dtype != first.dtype for p in self.parts):
            raise ValueError("the arrays of a Stack must share one shape and dtype")

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.parts), *self.parts[0].shape)

    @property
    def ndim(self) -> int:
        return self.parts[0].ndim + 1

    @property
    def dtype(self) -> np.dtype:
        return self.parts[0].dtype

    @property
    def nbytes(self) -> int:
        return len(self.parts) * self.parts[0].nbytes

    def joined(self) -> np.ndarray:
        return np.stack(self.parts)

    def raw_parts(self) -> tuple[memoryview, ...]:
        return tuple(memoryview(np.ascontiguousarray(p)).cast("B") for p in self.parts)


def check_storable(array: np.ndarray | Stack) -> None:
    """Raises ValueError for an array the format cannot describe."""
    if not isinstance(array, np.ndarray | Stack):
        raise ValueError(f"can only store numpy arrays, not {type(array).__name__}")
    if array.dtype.str not in DTYPES:
        raise ValueError(f"cannot store dtype {array.dtype}; allowed: {sorted(DTYPES)}")
    if array.ndim > MAX_NDIM:
        raise ValueError(f"cannot store {array.ndim} dimensions; at most {MAX_NDIM}")


def encode_header(key: ObjectKey, codec: Codec, array: np.ndarray | Stack,
                  payload: Sequence[bytes | memoryview]) -> bytes:
    """The header of `array` stored as `payload` (its bytes encoded, in one part or more)."""
    check_storable(array)
    shape = tuple(array.shape) + (0,) * (MAX_NDIM - array.ndim)
    fields = _FIELDS.pack(MAGIC, VERSION, KIND_CODES[key.kind], codec.code, array.ndim,
                          array.dtype.str.encode(), key.digest, *shape,
                          sum(len(part) for part in payload), parts_checksum(payload))
    return fields + _CHECKSUM.pack(checksum(fields))


def decode_header(data: bytes) -> Header:
    """Parses and verifies a header; raises CorruptObjectError (StaleObjectError for a valid
    magic with another version)."""
    if len(data) < HEADER_NBYTES:
        raise CorruptObjectError(f"truncated: {len(data)} bytes, a header is {HEADER_NBYTES}")
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptObjectError(f"bad magic {data[: len(MAGIC)]!r}")
    if data[_VERSION_OFFSET] != VERSION:
        raise StaleObjectError(f"format version {data[_VERSION_OFFSET]}, this is {VERSION}")
    fields = data[: _FIELDS.size]
    (stored_checksum,) = _CHECKSUM.unpack_from(data, _FIELDS.size)
    if checksum(fields) != stored_checksum:
        raise CorruptObjectError("header checksum mismatch")
    _, _, kind_code, fmt_code, ndim, dtype_str, digest, *rest = _FIELDS.unpack(fields)
    shape, (payload_nbytes, payload_checksum) = rest[:MAX_NDIM], rest[MAX_NDIM:]
    return _checked_header(kind_code, fmt_code, ndim, dtype_str, digest, shape, payload_nbytes,
                           payload_checksum)


def _checked_header(kind_code: int, fmt_code: int, ndim: int, dtype_str: bytes, digest: bytes,
                    shape: tuple[int, ...], payload_nbytes: int, payload_checksum: int) -> Header:
    dtype_name = dtype_str.rstrip(b"\0").decode("ascii", "replace")
    if kind_code not in KINDS_BY_CODE or fmt_code not in CODECS_BY_CODE:
        raise CorruptObjectError(f"unknown kind {kind_code} or format {fmt_code}")
    if ndim > MAX_NDIM or dtype_name not in DTYPES:
        raise CorruptObjectError(f"bad ndim {ndim} or dtype {dtype_name!r}")
    dtype = np.dtype(dtype_name)
    shape = tuple(shape[:ndim])
    if math.prod(shape) * dtype.itemsize > MAX_OBJECT_BYTES:  # exact: Python ints
        raise CorruptObjectError(f"shape {shape} {dtype} exceeds {MAX_OBJECT_BYTES} bytes")
    key = ObjectKey(KINDS_BY_CODE[kind_code], digest)
    return Header(key, CODECS_BY_CODE[fmt_code], shape, dtype, payload_nbytes, payload_checksum)


def parse_object_name(dir_name: str, file_name: str) -> ObjectKey | None:
    """The key an object file name stands for, or None for a name the store never writes."""
    match = _OBJECT_NAME.match(file_name)
    if match is None or match[1] not in KIND_CODES or match[2][:2] != dir_name:
        return None
    return ObjectKey(match[1], bytes.fromhex(match[2]))


class Disk:
    """File placement and I/O under `root`/objects. Thread-safe; knows nothing of budgets."""

    def __init__(self, root: str, *, fsync: bool = False) -> None:
        self.root = root
        self.objects_dir = os.path.join(root, "objects")
        self.fsync = fsync
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        fake = os.environ.get(FAKE_FREE_ENV)
        self._fake_free_bytes = int(fake) if fake else None  # free space left, as pretended

    def path_for(self, key: ObjectKey) -> str:
        return os.path.join(self.objects_dir, key.hex[:2], f"{key.kind}-{key.hex}.obj")

    def write_temp(self, final_path: str, header: bytes,
                   payload: Sequence[bytes | memoryview]) -> str:
        """Writes header + payload (its parts in order) to a new temp file beside `final_path`
        and returns its path. On any failure the temp file is removed before the error
        propagates."""
        os.makedirs(os.path.dirname(final_path), mode=0o700, exist_ok=True)
        temp_path = f"{final_path}.{os.getpid()}-{next(self._tokens)}.tmp"
        fd = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                self._write_all(fd, header)
                first, second = _halves(payload)
                for part in first:
                    self._write_all(fd, part)
                fault_point("cache_write_mid")
                for part in second:
                    self._write_all(fd, part)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            fault_point("after_write_before_rename")
        except BaseException:
            self.unlink(temp_path)
            raise
        return temp_path

    def commit(self, temp_path: str, final_path: str) -> None:
        os.rename(temp_path, final_path)

    def sync_dir(self, path: str) -> None:
        """Makes a rename in the directory of `path` durable (only when fsync is on)."""
        if not self.fsync:
            return
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: str) -> bool:
        """Removes a file; False if it was already gone."""
        try:
            nbytes = os.stat(path).st_size if self._fake_free_bytes is not None else 0
            os.unlink(path)
        except FileNotFoundError:
            return False
        if self._fake_free_bytes is not None:
            with self._lock:
                self._fake_free_bytes += nbytes
        return True

    def read_header(self, path: str) -> tuple[Header, int]:
        """The verified header of an object file and the file's size."""
        with open(path, "rb", buffering=0) as file:
            return decode_header(file.read(HEADER_NBYTES)), os.fstat(file.fileno()).st_size

    def read(self, path: str, key: ObjectKey, out: np.ndarray | None = None, *,
             mapped: bool = False) -> np.ndarray:
        """The array stored at `path` for `key`; raises CorruptObjectError for anything else,
        FileNotFoundError if there is no file. A raw object of `out`'s shape and dtype is read
        straight into `out` (and `out` returned): no buffer to allocate and copy from. On an
        error `out` may hold part of the object. `mapped`: a raw object is not copied at all
        but decoded over a read-only shared mapping of its file (the page cache's pages, all
        mapped in one call), verified the same; the mapping lives as long as the array and its
        views (the store never truncates a file, and an evicted one stays mapped until then)."""
        with open(path, "rb", buffering=0) as file:
            header = decode_header(file.read(HEADER_NBYTES))
            file_nbytes = os.fstat(file.fileno()).st_size
            check_matches(header, key, file_nbytes)
            into = out if not mapped and _fits_raw(header, out) else None
            if mapped and header.codec.name == "raw" and header.payload_nbytes:
                payload = memoryview(mmap.mmap(file.fileno(), file_nbytes, prot=mmap.PROT_READ,
                                               flags=mmap.MAP_SHARED | _POPULATE))
                payload = payload[HEADER_NBYTES:]
            else:
                payload = (np.empty(header.payload_nbytes, dtype=np.uint8) if into is None
                           else into.reshape(-1).view(np.uint8))
                if file.readinto(memoryview(payload)) != header.payload_nbytes:
                    raise CorruptObjectError("file shrank while read")
        if checksum(payload) != header.payload_checksum:
            raise CorruptObjectError("payload checksum mismatch")
        if into is not None:
            return into
        try:
            return header.codec.decode(memoryview(payload), header.shape, header.dtype)
        except CodecError as error:
            raise CorruptObjectError(str(error)) from error

    def _write_all(self, fd: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            chunk = view[:_CHUNK_BYTES]
            allowed = self._take_fake_space(len(chunk))
            written = os.write(fd, chunk[:allowed])
            self._give_back_fake_space(allowed - written)
            if allowed < len(chunk) and written == allowed:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{FAKE_FREE_ENV}")
            view = view[written:]

    def _take_fake_space(self, nbytes: int) -> int:
        if self._fake_free_bytes is None:
            return nbytes
        with self._lock:
            allowed = min(nbytes, self._fake_free_bytes)
            self._fake_free_bytes -= allowed
            return allowed

    def _give_back_fake_space(self, nbytes: int) -> None:
        if self._fake_free_bytes is not None and nbytes:
            with self._lock:
                self._fake_free_bytes += nbytes


def _halves(payload: Sequence[bytes | memoryview]
            ) -> tuple[list[memoryview], list[memoryview]]:
    """The payload's parts split at half its bytes (where a fault test stops a write)."""
    half = sum(len(part) for part in payload) // 2
    first, second = [], []
    for part in map(memoryview, payload):
        cut = max(0, min(len(part), half))
        first.append(part[:cut])
        second.append(part[cut:])
        half -= cut
    return first, second


def _fits_raw(header: Header, out: np.ndarray | None) -> bool:
    return (out is not None and header.codec.name == "raw" and out.flags.c_contiguous
            and tuple(out.shape) == tuple(header.shape) and out.dtype == header.dtype
            and out.nbytes == header.payload_nbytes)


def check_matches(header: Header, key: ObjectKey, file_nbytes: int) -> None:
    if header.key != key:
        raise CorruptObjectError(f"holds {header.key}, not {key} (swapped or misplaced)")
    if file_nbytes != header.file_nbytes:
        raise CorruptObjectError(
            f"file is {file_nbytes} bytes, header says {header.file_nbytes}")
