"""sandfs.reading on plain files (the kernel adds nothing here): a .npy that is no sandfs view
reads as `np.load` reads it, and so does a copy of a view that kept its xattrs on a
filesystem whose O_DIRECT wants aligned reads; a short file is an error."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from sandfs.reading import READERS_XATTR, read_view, sole_reader


def saved(tmp_path, array) -> str:
    path = str(tmp_path / "view.npy")
    np.save(path, array)
    return path


def test_a_plain_npy_reads_as_numpy_loads_it(tmp_path):
    array = (np.random.default_rng(0).random((2, 3, 5, 7, 3)) * 255).astype(np.uint8)
    path = saved(tmp_path, array)
    assert not sole_reader(path)
    got = read_view(path)
    assert got.dtype == array.dtype and np.array_equal(got, array)


def test_a_copy_of_a_view_with_its_xattrs_reads_off_the_mount(tmp_path):
    """`cp --preserve=xattr` or `rsync -X` keep `user.sand.readers`; ext4 opens the copy
    with O_DIRECT but refuses unaligned reads (EINVAL): it is read again as any file."""
    array = np.arange(3 * 5 * 7, dtype=np.uint8).reshape(3, 5, 7)
    path = saved(tmp_path, array)
    try:
        os.setxattr(path, READERS_XATTR, b"1")
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EPERM):
            pytest.skip(f"{tmp_path}'s filesystem keeps no user xattrs")
        raise
    assert sole_reader(path)
    arrays = []

    def new_array(shape, dtype):
        arrays.append(np.empty(shape, dtype))
        return arrays[-1]

    got = read_view(path, new_array)
    assert got is arrays[-1] and np.array_equal(got, array)


def test_an_array_not_in_c_order_reads_as_numpy_loads_it(tmp_path):
    array = np.asfortranarray(np.arange(60, dtype=np.uint8).reshape(3, 4, 5))
    assert np.array_equal(read_view(saved(tmp_path, array)), array)


def test_a_short_file_is_an_error(tmp_path):
    path = saved(tmp_path, np.zeros((4, 8, 8, 3), np.uint8))
    os.truncate(path, os.path.getsize(path) - 10)
    with pytest.raises(OSError, match="758 bytes of data where its header says 768"):
        read_view(path)
