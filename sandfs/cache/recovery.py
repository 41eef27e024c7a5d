"""What `ObjectStore.open` and `close` do to the cache directory: take it (one process at a time,
owned by this user), scan its files, and save and load the index snapshot of a clean close.

The scan removes temp files (interrupted writes), objects of another format version, corrupt
objects and foreign files, and reports every usable object. Headers are read only for objects
the snapshot does not vouch for: those of a clean close are checked on read instead. The snapshot
is deleted once read, so a crash after that forces a full header scan.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections import Counter
from dataclasses import dataclass

from sandfs.cache.disk import (
    CorruptObjectError,
    Disk,
    StaleObjectError,
    check_matches,
    checksum,
    parse_object_name,
)
from sandfs.cache.index import Index
from sandfs.cache.keys import ObjectKey
from sandfs.fileio import atomic_write, remove_leftover_temps

log = logging.getLogger(__name__)

INDEX_FILE = "index.json"
LOCK_FILE = "lock"
_INDEX_VERSION = 1


class StoreBusyError(RuntimeError):
    """Another process has the cache directory open."""


class CacheDirError(ValueError):
    """The cache directory is unsafe to use (owned by someone else, world-writable)."""


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    objects: int  # usable objects found
    bytes_used: int
    index_loaded: bool  # the snapshot of a clean close was used (else every header was read)
    temp_removed: int  # leftovers of interrupted writes
    corrupt_removed: int
    stale_removed: int  # objects of another format version
    foreign_removed: int  # files the store never writes
    missing: int  # in the snapshot but gone from disk
    evicted_over_budget: int  # the budget is smaller than what the last run left
    seconds: float


@dataclass(frozen=True, slots=True)
class FoundObject:
    """A file the scan kept: its header, or the snapshot of a clean close, vouches for it."""

    key: ObjectKey
    fmt: str
    file_nbytes: int


@dataclass(frozen=True, slots=True)
class Scan:
    """What the open-time scan kept, and what it removed (counted by kind of file)."""

    found: tuple[FoundObject, ...]
    corrupt_keys: tuple[ObjectKey, ...]  # removed as corrupt: whoever stores them recomputed them
    removed: Counter[str]  # "temp", "corrupt", "stale", "foreign"
    missing: int  # in the snapshot but gone from disk


@dataclass(frozen=True, slots=True)
class RootLock:
    fd: int  # holds the flock while open
    block_bytes: int  # the file system's allocation unit: what an object is charged in


def take_root(root: str, objects_dir: str) -> RootLock:
    """Creates the cache directory if needed, checks it is this user's and not world-writable,
    and locks it against other processes."""
    os.makedirs(root, mode=0o700, exist_ok=True)  # leaf mode: not widened by umask
    os.makedirs(objects_dir, mode=0o700, exist_ok=True)
    status = os.stat(root)
    if status.st_uid != os.geteuid():
        raise CacheDirError(f"cache dir {root} is owned by uid {status.st_uid}, "
                            f"not this user ({os.geteuid()})")
    if status.st_mode & 0o002:
        raise CacheDirError(f"cache dir {root} is world-writable; chmod 700 it")
    fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreBusyError(f"cache dir {root} is in use by another sandfs "
                             "process") from None
    return RootLock(fd, max(os.statvfs(root).f_frsize, 512))


def object_files(objects_dir: str) -> list[tuple[str, os.DirEntry]]:
    """(fan-out dir name, file entry) for every file under objects/, in sorted order."""
    files = []
    for dir_entry in sorted(os.scandir(objects_dir), key=lambda e: e.name):
        if dir_entry.is_dir(follow_symlinks=False):
            entries = sorted(os.scandir(dir_entry.path), key=lambda e: e.name)
            files += [(dir_entry.name, entry) for entry in entries]
        else:
            files.append(("", dir_entry))
    return files


def scan(disk: Disk, snapshot: dict[str, list] | None) -> Scan:
    """Every usable object under objects/; removes what is not (see the module docstring).
    `snapshot` is the loaded snapshot (consumed) or None."""
    found: list[FoundObject] = []
    corrupt: list[ObjectKey] = []
    removed: Counter[str] = Counter()
    for dir_name, file in object_files(disk.objects_dir):
        kept = _recover_file(disk, dir_name, file, snapshot, removed, corrupt)
        if kept is not None:
            found.append(kept)
    return Scan(tuple(found), tuple(corrupt), removed, len(snapshot or ()))


def _recover_file(disk: Disk, dir_name: str, file: os.DirEntry, snapshot: dict | None,
                  removed: Counter[str], corrupt: list[ObjectKey]) -> FoundObject | None:
    if file.name.endswith(".tmp"):
        disk.unlink(file.path)
        removed["temp"] += 1
        return None
    key = parse_object_name(dir_name, file.name)
    if key is None or not file.is_file(follow_symlinks=False):
        removed["foreign"] += 1
        if file.is_dir(follow_symlinks=False):
            log.warning("ignoring foreign directory %s in the cache", file.path)
        else:
            log.warning("removing foreign file %s from the cache", file.path)
            disk.unlink(file.path)
        return None
    file_nbytes = file.stat(follow_symlinks=False).st_size
    known = snapshot.pop(f"{dir_name}/{file.name}", None) if snapshot is not None else None
    if known is not None and known[1] == file_nbytes:
        return FoundObject(key, known[0], file_nbytes)  # headers of a clean close: checked on read
    fmt = _verified_format(disk, file.path, key, removed, corrupt)
    return None if fmt is None else FoundObject(key, fmt, file_nbytes)


def _verified_format(disk: Disk, path: str, key: ObjectKey, removed: Counter[str],
                     corrupt: list[ObjectKey]) -> str | None:
    try:
        header, file_nbytes = disk.read_header(path)
        check_matches(header, key, file_nbytes)
    except StaleObjectError as error:
        log.info("removing cache object %s of another format version: %s", path, error)
        removed["stale"] += 1
    except (CorruptObjectError, OSError) as error:
        log.warning("corrupt cache object %s (%s): deleted, will be recomputed", path, error)
        removed["corrupt"] += 1
        corrupt.append(key)
    else:
        return header.codec.name
    disk.unlink(path)
    return None


def load_snapshot(root: str) -> dict[str, list] | None:
    """{relative path: [fmt, file_nbytes]} saved by the last clean close, or None. The file
    is deleted once read: a crash from here on must not trust it."""
    path = os.path.join(root, INDEX_FILE)
    try:
        with open(path, "rb") as file:
            digest_line, body = file.read().split(b"\n", 1)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.info("cache index snapshot unreadable (%s): scanning headers", error)
        return None
    finally:
        remove_leftover_temps(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    try:
        if digest_line.decode() != f"{checksum(body):016x}":
            raise ValueError("checksum mismatch")
        data = json.loads(body)
        if data["version"] != _INDEX_VERSION:
            raise ValueError(f"version {data['version']}")
        return dict(data["objects"])
    except (ValueError, KeyError, TypeError) as error:
        log.info("cache index snapshot invalid (%s): scanning headers", error)
        return None


def save_snapshot(root: str, disk: Disk, index: Index) -> None:
    objects = {}
    for entry in index:
        name = os.path.relpath(disk.path_for(entry.key), disk.objects_dir)
        objects[name] = [entry.fmt, entry.file_nbytes]
    body = json.dumps({"version": _INDEX_VERSION, "objects": objects}).encode()
    atomic_write(os.path.join(root, INDEX_FILE),
                 f"{checksum(body):016x}\n".encode() + body, durable=disk.fsync)
