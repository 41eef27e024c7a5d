"""How much of a file the kernel's page cache holds (mincore(2) on a read-only mapping: the
mapping itself reads nothing)."""

from __future__ import annotations

import ctypes
import mmap
import os
import time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
MAP_FAILED = ctypes.c_void_p(-1).value


def cached_pages(path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address == MAP_FAILED:
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vector = ctypes.create_string_buffer(pages)
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(byte & 1 for byte in vector.raw)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def wait_uncached(path, timeout: float = 5.0) -> int:
    """Poll until no page of `path` is cached (dropping is asynchronous); the pages left."""
    give_up = time.monotonic() + timeout
    while (left := cached_pages(path)) and time.monotonic() < give_up:
        time.sleep(0.02)
    return left
