"""A mount's layout: where the mountpoint, the datasets and the cache dir may be, by their paths
alone (nothing under the mountpoint is touched: a hung mount there cannot hang the check). Light
to import: the command line checks it before it starts the scan ahead of the daemon's imports."""

from __future__ import annotations

from collections.abc import Iterable

from sandfs.errors import UserError
from sandfs.mounttable import SANDFS_FSTYPE, mountpoints
from sandfs.placement import check_dataset_place, inside, real_path
from sandfs.remote.options import is_remote_url


def check_layout(mountpoint: str, cache_dir: str, dataset_dirs: Iterable[str]) -> None:
    """Refuse layouts where serving would wait on itself: the mountpoint in a dataset or in
    another sandfs mount, a dataset or the cache dir under the mountpoint."""
    outer = next((m for m in mountpoints(SANDFS_FSTYPE)
                  if inside(mountpoint, m) and m != mountpoint), None)
    if outer is not None:
        raise UserError(f"mountpoint {mountpoint} is inside the sandfs mount {outer}: "
                        f"reads would wait on the daemon that serves them")
    real_mountpoint = real_path(mountpoint)
    for dataset in (d for d in dataset_dirs if not is_remote_url(d)):  # URLs: fetched copies
        if inside(real_mountpoint, dataset):
            raise UserError(f"mountpoint {mountpoint} is the dataset directory {dataset} or "
                            f"inside it: the mount would hide the videos it reads")
        if inside(dataset, real_mountpoint):
            raise UserError(f"dataset directory {dataset} is inside the mountpoint "
                            f"{mountpoint}: the mount would hide the videos it reads")
        check_dataset_place(dataset, cache_dir)
    if inside(cache_dir, mountpoint) or inside(real_path(cache_dir), real_mountpoint):
        raise UserError(f"cache dir {cache_dir} is inside the mountpoint {mountpoint}; "
                        f"give a --cache-dir outside it")
