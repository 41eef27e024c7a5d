"""The mount's one call: every remote dataset of its tasks prepared together, so that their
copies share the storage budget and none deletes another to make room."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sandfs.remote.copy import LocalCopy, dataset_digest, log_progress, prepare_remote_dataset
from sandfs.remote.options import (
    FrozenOptions,
    check_dataset_url,
    check_storage_options,
    freeze_options,
    thaw_options,
)
from sandfs.remote.stats import RemoteStats

__all__ = ["RemoteCopies", "RemoteSpec", "prepare_remote_datasets"]


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    """A remote dataset as a task config names it (hashable: tasks naming the same dataset
    share one copy)."""

    url: str
    storage_options: FrozenOptions
    manifest: str | None
    extensions: tuple[str, ...]

    @classmethod
    def of(cls, url: str, storage_options: Mapping[str, Any] | None, manifest: str | None,
           extensions: Iterable[str]) -> RemoteSpec:
        options = check_storage_options(storage_options)
        return cls(check_dataset_url(url), freeze_options(options), manifest,
                   tuple(e.lower() for e in extensions))

    @property
    def digest(self) -> str:
        return dataset_digest(self.url, thaw_options(self.storage_options), self.manifest,
                              self.extensions)


@dataclass(frozen=True, slots=True)
class RemoteCopies:
    copies: tuple[tuple[RemoteSpec, LocalCopy], ...]

    def root(self, spec: RemoteSpec) -> str:
        """The local folder that stands for `spec` in the scan and the plan."""
        return dict(self.copies)[spec].root

    @property
    def bytes_on_disk(self) -> int:
        """What the copies take of the storage budget; the object store gets the rest."""
        return sum(copy.bytes_on_disk for _, copy in self.copies)

    @property
    def stats(self) -> RemoteStats:
        """`status.json`'s `remote` (`.as_status()`)."""
        return sum((copy.stats for _, copy in self.copies), RemoteStats())


def prepare_remote_datasets(specs: Iterable[RemoteSpec], *, cache_dir: str,
                            budget_bytes: int | None, timeout_s: float = 10.0,
                            workers: int = 4, progress_every_s: float = 10.0) -> RemoteCopies:
    """Fetch each distinct dataset once (see `prepare_remote_dataset`); together they must fit
    in `budget_bytes`, and only copies of datasets outside `specs` are deleted for room."""
    unique = list(dict.fromkeys(specs))
    keep = {spec.digest for spec in unique}
    copies = []
    left = budget_bytes
    for spec in unique:
        copy = prepare_remote_dataset(
            spec.url, storage_options=thaw_options(spec.storage_options), manifest=spec.manifest,
            cache_dir=cache_dir, extensions=spec.extensions, timeout_s=timeout_s,
            budget_bytes=left, keep=keep, workers=workers,
            progress=log_progress(spec.url, progress_every_s))
        copies.append((spec, copy))
        if left is not None:
            left -= copy.bytes_on_disk
    return RemoteCopies(tuple(copies))
