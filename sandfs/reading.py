"""Reading a view from a training process, straight into the array that holds it.

`np.load` on a view works. This reads it for about half the cost when the view has one
reader: it is opened with O_DIRECT, so the daemon's reply lands in the caller's array, where
through the page cache the kernel first copies it into cache pages, then into the array, and
drops the pages after (docs/performance.md#the-readers-side). A view several tasks read (a search's
trials share one object, `user.sand.readers` > 1) is read through the page cache, which
serves all but its first reader. Anything that is not a sandfs view is read as a plain file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

import numpy as np

READERS_XATTR = "user.sand.readers"

NewArray = Callable[[tuple[int, ...], np.dtype], np.ndarray]  # uninitialized, to be filled


def read_view(path: str | os.PathLike[str], new_array: NewArray = np.empty) -> np.ndarray:
    """The .npy array at `path`, read once into `new_array(shape, dtype)` (whatever memory it
    lives in: `sandfs.torch` passes a tensor's `.numpy()`)."""
    direct = sole_reader(path)
    try:
        return _read(path, new_array, direct)
    except OSError as exc:
        # a copy of a view off the mount, its xattrs kept, on a filesystem whose O_DIRECT
        # wants aligned reads (ext4): read as any file
        if not direct or exc.errno != errno.EINVAL:
            raise
        return _read(path, new_array, direct=False)


def sole_reader(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a sandfs view that no other task reads."""
    try:
        return os.getxattr(path, READERS_XATTR) == b"1"
    except OSError:  # not a sandfs view (ENODATA, ENOTSUP): nothing said, nothing assumed
        return False


def open_view(path: str | os.PathLike[str], direct: bool) -> int:
    """A read-only descriptor; with `direct`, O_DIRECT where the filesystem takes it."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    if direct:
        try:
            return os.open(path, flags | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: this filesystem has no O_DIRECT (tmpfs)
                raise
    return os.open(path, flags)


def _read(path: str | os.PathLike[str], new_array: NewArray, direct: bool) -> np.ndarray:
    with open(open_view(path, direct), "rb", buffering=0) as file:
        version = np.lib.format.read_magic(file)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read_header(file)
        if fortran_order or dtype.hasobject:  # never a view: whatever np.load makes of it
            file.seek(0)
            return np.load(file, allow_pickle=False)
        array = new_array(shape, dtype)
        data = memoryview(array).cast("B")
        got = file.readinto(data)
        if got != data.nbytes:
            raise OSError(errno.EIO, f"{path}: {got} bytes of data where its header says "
                                     f"{data.nbytes}")
    return array
