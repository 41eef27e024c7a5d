"""Datasets on remote storage (s3://, http(s)://): listed, fetched once into the cache dir, then
scanned, planned and served as a local folder.

    copies = prepare_remote_datasets([RemoteSpec.of(url, options, manifest, extensions)],
                                     cache_dir=..., budget_bytes=...)
    scan_dataset(copies.root(spec), ...)   # and the store gets budget - copies.bytes_on_disk

fsspec, s3fs and aiohttp (the `remote` extra) are imported only when a URL is prepared.
"""

import importlib

# each name and the module that defines it: imported at its first use, so that importing a
# light module of this package (the config checks its URLs with `options`) or a mount of
# local data does not import the fetching machinery (6-7 ms of a cold mount's imports)
_WHERE = {
    "RemoteError": "connect",
    "FetchProgress": "copy", "LocalCopy": "copy", "dataset_digest": "copy",
    "log_progress": "copy", "prepare_remote_dataset": "copy",
    "RemoteCopies": "datasets", "RemoteSpec": "datasets", "prepare_remote_datasets": "datasets",
    "RetryPolicy": "fetch",
    "STREAMING_REFUSAL": "options", "RemoteConfigError": "options",
    "check_dataset_url": "options", "check_manifest": "options",
    "check_storage_options": "options", "is_remote_url": "options",
    "RemoteEntry": "source",
    "RemoteStats": "stats",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
