"""Shared memory for job worker processes: memfds, which have no name and so cannot outlive
the processes that map them (a daemon killed with SIGKILL leaves nothing in /dev/shm), passed
to a worker as descriptors. A batch buffer made here (`shared_empty`) is found again from any
array over it (`locate`): its descriptor, while the mapping lives, and the array's offset."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from collections.abc import Sequence

import numpy as np

NAME = "sandfs-shm"  # what /proc/PID/fd and /proc/PID/maps show (memfd:sandfs-shm)

_lock = threading.Lock()
_fds: dict[int, int] = {}  # id(mapping) -> its memfd, while the mapping lives


def shared_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` in shared memory (not zeroed by us: its pages are zero, and
    first written by whichever process fills them)."""
    fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, max(1, nbytes))
        mapping = mmap.mmap(fd, max(1, nbytes))
    except BaseException:
        os.close(fd)
        raise
    with _lock:
        _fds[id(mapping)] = fd
    weakref.finalize(mapping, _forget, id(mapping), fd)
    return np.frombuffer(mapping, np.uint8, count=nbytes)


def _forget(key: int, fd: int) -> None:
    with _lock:
        _fds.pop(key, None)
    os.close(fd)


def locate(array: np.ndarray) -> tuple[int, int]:
    """(the memfd, the offset in it) of an array over a `shared_empty` buffer. ValueError: it
    is over other memory (a worker could not write it)."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    mapping = root.base.obj if isinstance(root.base, memoryview) else None
    with _lock:
        fd = _fds.get(id(mapping)) if isinstance(mapping, mmap.mmap) else None
    if fd is None or not array.flags.c_contiguous:
        raise ValueError("not a contiguous array over shared memory")
    return fd, array.ctypes.data - root.ctypes.data


def populate(array: np.ndarray) -> bool:
    """Map an array's pages into this process now, in this thread and without the GIL (a
    foreign call): a worker wrote them, and the FUSE loop that serves them next would take a
    page fault for every 64 KiB with the GIL held (19 MB: 1.7 ms against 3.4 ms to copy, the
    least of six on this VM). False where the kernel could not (before Linux 5.14)."""
    if _madvise is None or not array.nbytes:
        return False
    start = array.ctypes.data & ~(mmap.PAGESIZE - 1)
    end = array.ctypes.data + array.nbytes
    return _madvise(start, end - start, MADV_POPULATE_READ) == 0


def _libc_madvise():
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


MADV_POPULATE_READ = 22  # linux/mman.h
_madvise = _libc_madvise()


def pack(arrays: Sequence[np.ndarray]) -> tuple[int, list[int]]:
    """The arrays copied one after the other into a new memfd: (its descriptor, the offsets),
    the caller's to close."""
    offsets, total = [], 0
    for one in arrays:
        offsets.append(total)
        total += -(-one.nbytes // 64) * 64
    fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, max(1, total))
        with mmap.mmap(fd, max(1, total)) as mapping:
            for one, offset in zip(arrays, offsets, strict=True):
                np.ndarray(one.shape, one.dtype, buffer=mapping, offset=offset)[...] = one
    except BaseException:
        os.close(fd)
        raise
    return fd, offsets


def attach(fd: int, *, private: bool = False) -> mmap.mmap:
    """Map a memfd passed here (the descriptor is closed: the mapping keeps the memory).
    `private`: writes stay in this process (copy on write)."""
    try:
        size = os.fstat(fd).st_size
        access = mmap.ACCESS_COPY if private else mmap.ACCESS_WRITE
        return mmap.mmap(fd, size, access=access)
    finally:
        os.close(fd)
