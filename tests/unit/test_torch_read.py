"""sandfs.torch.read_view on plain .npy files (the kernel adds nothing here): the tensor equals
the array, in shared memory when asked (a DataLoader worker's), and a file shorter than its
header says is an error, never a batch with garbage at its end."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from sandfs.torch import read_view  # noqa: E402  (after the skip when torch is missing)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_the_tensor_equals_the_array(tmp_path, shared, dtype):
    array = (np.random.default_rng(0).random((2, 4, 6, 8, 3)) * 255).astype(dtype)
    np.save(tmp_path / "view.npy", array)
    clips = read_view(tmp_path / "view.npy", shared=shared)
    assert clips.is_shared() == shared
    assert clips.numpy().dtype == array.dtype and np.array_equal(clips.numpy(), array)


def test_an_array_not_in_c_order_reads_as_numpy_loads_it(tmp_path):
    array = np.asfortranarray(np.arange(60, dtype=np.uint8).reshape(3, 4, 5))
    np.save(tmp_path / "view.npy", array)
    assert np.array_equal(read_view(tmp_path / "view.npy", shared=True).numpy(), array)


def test_a_short_file_is_an_error(tmp_path):
    path = tmp_path / "view.npy"
    np.save(path, np.zeros((4, 8, 8, 3), np.uint8))
    os.truncate(path, path.stat().st_size - 10)
    with pytest.raises(OSError, match="758 bytes of data where its header says 768"):
        read_view(path, shared=True)
