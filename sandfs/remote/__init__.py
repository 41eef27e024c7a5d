"""Datasets on remote storage (s3://, http(s)://): listed, fetched once into the cache dir, then
scanned, planned and served as a local folder.

    copies = prepare_remote_datasets([RemoteSpec.of(url, options, manifest, extensions)],
                                     cache_dir=..., budget_bytes=...)
    scan_dataset(copies.root(spec), ...)   # and the store gets budget - copies.bytes_on_disk

fsspec, s3fs and aiohttp (the `remote` extra) are imported only when a URL is prepared.
"""

from sandfs.remote.connect import RemoteError
from sandfs.remote.copy import (
    FetchProgress,
    LocalCopy,
    dataset_digest,
    log_progress,
    prepare_remote_dataset,
)
from sandfs.remote.datasets import RemoteCopies, RemoteSpec, prepare_remote_datasets
from sandfs.remote.fetch import RemoteStats, RetryPolicy
from sandfs.remote.options import (
    STREAMING_REFUSAL,
    RemoteConfigError,
    check_dataset_url,
    check_manifest,
    check_storage_options,
    is_remote_url,
)
from sandfs.remote.source import RemoteEntry

__all__ = [
    "STREAMING_REFUSAL",
    "FetchProgress",
    "LocalCopy",
    "RemoteConfigError",
    "RemoteCopies",
    "RemoteEntry",
    "RemoteError",
    "RemoteSpec",
    "RemoteStats",
    "RetryPolicy",
    "check_dataset_url",
    "check_manifest",
    "check_storage_options",
    "dataset_digest",
    "is_remote_url",
    "log_progress",
    "prepare_remote_dataset",
    "prepare_remote_datasets",
]
