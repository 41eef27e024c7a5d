"""A PyTorch dataset over the batch views of one task on a sandfs mount.

Only `import sandfs.torch` imports torch; the rest of sandfs never does. Each item is one
ready batch: the daemon already sampled, decoded, augmented and collated it, so use the
dataset with `DataLoader(dataset, batch_size=None, sampler=dataset.sampler())` (no second
collation). The sampler runs in the main process and hands each worker `(epoch, iteration)`
keys, as a DistributedSampler's indices carry its epoch: a worker's copy of the dataset (made
once with `persistent_workers=True`) never decides which epoch it reads. The dataset holds
nothing but paths and numbers: it pickles for DataLoader workers under fork and spawn alike,
and every read opens and closes its own file. In a worker, a view is read straight into
shared memory, as DataLoader's own collate builds its batches there: the main process gets it
without another copy.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from sandfs import reading
from sandfs.client import ConfigSource, TaskHandle, register_task
from sandfs.plan.shard import shard_from_env

try:
    import torch
    from torch.utils.data import Dataset, Sampler, get_worker_info
except ImportError as exc:  # torch is an optional dependency of sandfs
    raise ImportError("sandfs.torch needs PyTorch: install it (pip install torch) to use "
                      "ViewDataset; the rest of sandfs works without it") from exc

CLASSES_XATTR = "user.sand.classes"
META_XATTR = "user.sand.meta"
META_FILE = "meta.json"
NO_LABEL = -1
Key = tuple[int, int]  # (epoch, iteration): what the sampler hands a worker


class ViewDataset(Dataset):
    """Map-style dataset over one epoch of `task`'s views under `mountpoint`.

    `dataset[(epoch, iteration)]` is `(clips, labels, meta)`: `clips` the view as a tensor
    (its shape, dtype and layout as stored: (N, T, H, W, C) or (N, C, T, H, W)), `labels` an
    int64 tensor with each clip's `label_index` (-1 where the clip has no label) and `meta` the
    view's `user.sand.meta`. `set_epoch(e)` moves to another epoch (the DistributedSampler
    idiom): `dataset[i]` and `len(dataset)` are then epoch e's, and so are the keys
    `sampler()` yields from its next pass. `for epoch in dataset.epochs(): ...` walks them all.
    In a DataLoader worker only `(epoch, iteration)` keys are taken: the worker's copy does not
    know which epoch the main process set.
    """

    def __init__(self, mountpoint: str | os.PathLike[str], task: str, epoch: int = 0) -> None:
        self.root = Path(mountpoint) / task
        self.task = task
        self.lease: TaskHandle | None = None  # set by join_task: the task ends with it
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no task {task!r} on the mount "
                                    f"(is {mountpoint} a sandfs mount serving it?)")
        self.num_epochs = sum(name.isdigit() for name in os.listdir(self.root))
        self.epoch = 0
        self._lengths: dict[int, int] = {}
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        self._check_epoch(epoch)
        self.epoch = epoch

    def epochs(self, start: int = 0) -> Iterator[int]:
        """Set each epoch from `start` on in turn, yielding its number."""
        for epoch in range(start, self.num_epochs):
            self.set_epoch(epoch)
            yield epoch

    def close(self) -> None:
        """End the task this dataset registered (`join_task`); nothing for one it did not."""
        if self.lease is not None:
            self.lease.close()

    def __enter__(self) -> ViewDataset:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "lease": None}  # a worker's copy never ends the task

    def sampler(self) -> EpochSampler:
        """The sampler to give DataLoader: each pass yields the keys of the epoch set then."""
        return EpochSampler(self)

    def __len__(self) -> int:
        return self.iterations(self.epoch)

    def iterations(self, epoch: int) -> int:
        """How many views epoch `epoch` has."""
        self._check_epoch(epoch)
        if epoch not in self._lengths:
            self._lengths[epoch] = len(os.listdir(self.root / str(epoch)))
        return self._lengths[epoch]

    @property
    def classes(self) -> list[str]:
        """The task's class names (sorted, or "0".."N" for class-index labels): a
        label_index indexes this list."""
        return json.loads(os.getxattr(self.root, CLASSES_XATTR))

    def path(self, iteration: int, epoch: int | None = None) -> Path:
        return self.root / str(self.epoch if epoch is None else epoch) / str(iteration) / "view"

    def __getitem__(self, key: int | Key) -> tuple[torch.Tensor, torch.Tensor, dict]:
        epoch, iteration = self._key(key)
        if not 0 <= iteration < self.iterations(epoch):
            raise IndexError(f"epoch {epoch} of task {self.task} has "
                             f"{self.iterations(epoch)} iterations, not {iteration}")
        path = self.path(iteration, epoch)
        clips = read_view(path, shared=get_worker_info() is not None)
        meta = view_meta(path)
        labels = [NO_LABEL if s["label_index"] is None else s["label_index"]
                  for s in meta["samples"]]
        return clips, torch.tensor(labels, dtype=torch.int64), meta

    def _key(self, key: int | Key) -> Key:
        if isinstance(key, tuple):
            epoch, iteration = key
            return epoch, iteration
        if get_worker_info() is not None:  # this copy's epoch may be one the main process left
            raise TypeError(
                f"ViewDataset got index {key!r} in a DataLoader worker, which cannot know the "
                f"epoch the main process set: pass sampler=dataset.sampler() to DataLoader "
                f"(it hands workers (epoch, iteration) keys)")
        return self.epoch, key

    def _check_epoch(self, epoch: int) -> None:
        if not 0 <= epoch < self.num_epochs:
            raise ValueError(f"task {self.task} has epochs 0..{self.num_epochs - 1}, "
                             f"not {epoch}")


def join_task(mountpoint: str | os.PathLike[str], config: ConfigSource, *,
              name: str | None = None,
              environ: Mapping[str, str] = os.environ) -> ViewDataset:
    """Register this process's share of task `config` on the live mount at `mountpoint` and
    return its dataset. Under torchrun (WORLD_SIZE and RANK set) that is rank RANK's shard,
    the task `NAME.rRANK` (`dataset.sampling.shard`: every video once per epoch across the
    ranks); otherwise the whole task. `config` and `name` are as `sandfs.client.prepare_task`
    takes them. The task is held by a lease: it ends with `dataset.close()`, the `with` block,
    or this process however it exits, so a crashed run leaves nothing behind."""
    handle = register_task(mountpoint, config, name=name, shard=shard_from_env(environ))
    try:
        dataset = ViewDataset(mountpoint, handle.view.task)
    except BaseException:
        handle.close()
        raise
    dataset.lease = handle
    return dataset


class EpochSampler(Sampler[Key]):
    """DataLoader's sampler for a ViewDataset: in the main process, each pass yields
    `(epoch, iteration)` for every iteration of the epoch the dataset is set to then, in order
    (the plan already shuffled the videos; reading in order is what the daemon prefetches)."""

    def __init__(self, dataset: ViewDataset) -> None:
        self.dataset = dataset

    def set_epoch(self, epoch: int) -> None:
        """As DistributedSampler.set_epoch: sets the dataset's epoch."""
        self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[Key]:
        epoch = self.dataset.epoch
        return ((epoch, iteration) for iteration in range(self.dataset.iterations(epoch)))


def view_meta(path: Path) -> dict:
    """The view's `user.sand.meta`; past the kernel's 64 KiB xattr limit (E2BIG), the same
    JSON from ITERATION/meta.json."""
    try:
        return json.loads(os.getxattr(path, META_XATTR))
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        return json.loads((path.parent / META_FILE).read_bytes())


def read_view(path: str | os.PathLike[str], *, shared: bool = False) -> torch.Tensor:
    """The view at `path` as a tensor, read once, straight into it (`sandfs.reading`: with
    O_DIRECT where this task is its only reader). `shared`: in shared memory, for a DataLoader
    worker to hand to the main process as it is; a tensor in ordinary memory is copied into
    shared memory there, 19 MB more to write (and fresh pages to fault in) per SlowFast-size
    batch (docs/performance.md#the-readers-side)."""
    made: list[torch.Tensor] = []

    def new_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        made.append(new_tensor(shape, dtype, shared=shared))  # again if read again
        return made[-1].numpy()

    array = reading.read_view(path, new_array)
    return made[-1] if made else torch.from_numpy(array)


def new_tensor(shape: tuple[int, ...], dtype: np.dtype, *, shared: bool) -> torch.Tensor:
    """An uninitialized CPU tensor; `shared`: in shared memory, as DataLoader's own collate
    makes its batches in workers."""
    if not shared:  # numpy's memory: huge pages for a big array, where torch's has 4 KiB ones
        return torch.from_numpy(np.empty(shape, dtype))
    proto = torch.from_numpy(np.empty(0, dtype))
    numel = int(np.prod(shape))
    storage = proto._typed_storage()._new_shared(numel, device=proto.device)
    return proto.new(storage).view(shape)
