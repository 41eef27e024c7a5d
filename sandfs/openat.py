"""Opening a path a task names without letting a symlink redirect it: a root daemon opens,
for a user, paths inside folders that user may rename or replace with a link at any moment
(docs/deploy.md#what-the-daemon-opens). A leaf: no PyAV, no numpy."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable

Identity = tuple[int, int]  # (st_dev, st_ino)

_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_SYMLINKS = 0x04
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_missing = False  # set once the kernel answered ENOSYS


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def open_no_symlinks(path: str, flags: int) -> int:
    """A descriptor of the absolute, resolved `path` reached through no symlink at all: a
    folder swapped for a link since the path was resolved gives ELOOP (or ENOTDIR) instead of
    the link's target. openat2 with RESOLVE_NO_SYMLINKS where the kernel has it (5.6), else a
    walk that opens one component at a time with O_NOFOLLOW."""
    global _openat2_missing
    if not path.startswith("/"):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    if not _openat2_missing:
        how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS)
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(AT_FDCWD),
                           ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EPERM):  # EPERM: a seccomp filter refuses it
            raise OSError(code, os.strerror(code), path)
        _openat2_missing = True
    return _walk_open(path, flags)


def _walk_open(path: str, flags: int) -> int:
    """open_no_symlinks without openat2: each folder opened with O_DIRECTORY | O_NOFOLLOW
    relative to the one before, the last component with O_NOFOLLOW."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    folder_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    current = os.open("/", folder_flags)
    try:
        for part in parts[:-1]:
            following = os.open(part, folder_flags, dir_fd=current)
            os.close(current)
            current = following
        return os.open(parts[-1] if parts else ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=current)
    finally:
        os.close(current)


# for reading a file a task names: through no symlink (the last one: ELOOP), and O_NONBLOCK, as
# a FIFO put in the file's place would hold the thread in open() until some writer came
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def open_regular(path: str, not_regular: Callable[[], OSError],
                 opener: Callable[[str], int] | None = None) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at `path`, opened with READ_FLAGS through no symlink
    (`open_no_symlinks`; `opener`: another way to get one, its errors its own), and its
    fstat: the checks are made on the descriptor, so what is read is what was checked.
    Anything but a regular file is closed and raises `not_regular()`."""
    fd = opener(path) if opener else open_no_symlinks(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular()
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def pread_file(path: str, offset: int, size: int) -> tuple[os.stat_result, bytes]:
    """In a thread: (fstat, `size` bytes at `offset`) of a regular file (`open_regular`);
    OSError otherwise."""
    fd, st = open_regular(path, lambda: OSError(errno.EINVAL, "not a regular file", path))
    try:
        return st, os.pread(fd, size, offset) if size else b""
    finally:
        os.close(fd)
