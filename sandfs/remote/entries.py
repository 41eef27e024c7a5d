"""One video file of a remote dataset, as the store describes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandfs.remote.connect import RemoteError


@dataclass(frozen=True, slots=True)
class RemoteEntry:
    rel_path: str  # POSIX, relative to the dataset URL, folders kept (labels by dirname)
    size_bytes: int
    etag: str  # ETag, else Last-Modified; "" where the store gives neither (size decides)
    path: str  # where the store has it (an fsspec path; URL-quoted for HTTP)


def entry_from_info(rel_path: str, path: str, info: Mapping[str, Any]) -> RemoteEntry:
    size = info.get("size")
    if not isinstance(size, int) or size < 0:
        raise RemoteError(f"{path}: the store gives no size for it")
    tag = info.get("ETag") or info.get("Last-Modified") or info.get("LastModified") or ""
    return RemoteEntry(rel_path=rel_path, size_bytes=size, etag=str(tag), path=path)
