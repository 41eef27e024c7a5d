"""Crash-safe file replacement: a reader sees the old file or the new one, never a torn one."""

from __future__ import annotations

import contextlib
import glob
import os
import secrets


def atomic_write(path: str, data: bytes, *, durable: bool = True, mode: int = 0o600) -> None:
    """Replace `path` with `data`: a temp file in the same directory, written, fsynced, renamed
    over `path`, then the directory fsynced so that the rename survives a power cut. The temp
    file is removed on any failure. `durable=False` skips both fsyncs (a cache that can be
    rebuilt trades them for speed)."""
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 mode)
    try:
        try:
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
