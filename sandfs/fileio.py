"""Crash-safe file replacement: a reader sees the old file or the new one, never a torn one.
State files (JSON documents kept between runs) also carry a checksum, so that a damaged one is
found, discarded and rebuilt instead of silently changing what the mount serves."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterable, Iterator

import xxhash

log = logging.getLogger(__name__)

# the last key of a checked JSON document: the xxh3-64 of the document's bytes without it
CHECKSUM_KEY = "xxh3_64"
_CHECKSUM_MARK = f',"{CHECKSUM_KEY}":"'.encode()


class DamagedFile(ValueError):
    """A state file whose checksum does not match (or that has none)."""


class _DamagedCount:
    """State files found damaged in this process: status.json's `state_files_rebuilt`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self) -> None:
        with self._lock:
            self._count += 1

    @property
    def count(self) -> int:
        return self._count


DAMAGED = _DamagedCount()


def write_checked_json(path: str, document: dict, *, durable: bool = True) -> None:
    """`atomic_write` a JSON object with its checksum as the last key (still plain JSON)."""
    write_checked_pieces(path, [json.dumps(document, separators=(",", ":")).encode()],
                         durable=durable)


def write_checked_pieces(path: str, body: Iterable[bytes], *, durable: bool = True) -> None:
    """`write_checked_json` of a JSON object given as its text's pieces, each written as it
    comes: a scan index of 250,000 rows held its 60 MB text four times at once (dumped,
    encoded, sealed, joined)."""
    hasher = xxhash.xxh3_64()

    def sealed() -> Iterator[bytes]:
        held, size = b"", 0
        for piece in body:
            if piece:
                hasher.update(piece)
                size += len(piece)
                if held:
                    yield held
                held = piece
        if not held.endswith(b"}"):
            raise ValueError("a checked document is a JSON object")
        yield held[:-1] + (_CHECKSUM_MARK if size > 2 else _CHECKSUM_MARK[1:])
        yield hasher.hexdigest().encode() + b'"}'

    atomic_write_pieces(path, sealed(), durable=durable)


def read_checked_json(path: str) -> dict:
    """A document written by `write_checked_json`. FileNotFoundError when missing; DamagedFile
    (logged and counted) when its bytes are not what was written."""
    with open(path, "rb") as f:
        body = _unseal(f.read())
    if body is None:
        DAMAGED.add()
        log.warning("state file %s is damaged (checksum mismatch): discarded, it is rebuilt",
                    ascii(path))
        raise DamagedFile(f"{path}: checksum mismatch")
    return json.loads(body)


def _unseal(raw: bytes) -> bytes | None:
    """The document without its checksum, or None when the checksum is missing or wrong."""
    mark = raw.rfind(_CHECKSUM_MARK)
    if mark >= 0:
        body, digest = raw[:mark] + b"}", raw[mark + len(_CHECKSUM_MARK):-2]
    elif raw.startswith(b"{" + _CHECKSUM_MARK[1:]):
        body, digest = b"{}", raw[len(_CHECKSUM_MARK):-2]
    else:
        return None
    ok = raw.endswith(b'"}') and xxhash.xxh3_64_hexdigest(body).encode() == digest
    return body if ok else None


def atomic_write(path: str, data: bytes, *, durable: bool = True, mode: int = 0o600) -> None:
    """Replace `path` with `data`: a temp file in the same directory, written, fsynced, renamed
    over `path`, then the directory fsynced so that the rename survives a power cut. The temp
    file is removed on any failure. `durable=False` skips both fsyncs (a cache that can be
    rebuilt trades them for speed)."""
    atomic_write_pieces(path, [data], durable=durable, mode=mode)


def atomic_write_pieces(path: str, pieces: Iterable[bytes], *, durable: bool = True,
                        mode: int = 0o600) -> None:
    """`atomic_write` of the pieces' bytes, one after the other, each written as it comes."""
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 mode)
    try:
        try:
            for data in pieces:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        sync_directory(directory)


def sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftover_temps(path: str) -> int:
    """Remove the temp files of `path` that a killed writer left; how many there were. Only
    for a directory no other process writes `path` in at the same time."""
    directory, name = os.path.split(os.path.abspath(path))
    removed = 0
    for leftover in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(name)}.*.tmp")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
            removed += 1
    return removed
