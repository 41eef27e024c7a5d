"""What a remote dataset holds: the video files under its URL (listed, sub-folders followed) or
those a manifest names, as `RemoteEntry` records of relative path, size and version tag."""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from sandfs.remote.connect import RemoteError
from sandfs.remote.entries import RemoteEntry, entry_from_info
from sandfs.remote.fetch import Fetcher, parallel_map

__all__ = ["RemoteEntry", "entry_from_info", "list_dataset", "parse_manifest"]

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 64 << 20
MAX_HTTP_DEPTH = 32  # folders below the dataset URL that a listing follows
MAX_HTTP_FOLDERS = 100_000  # listing pages, so that linked loops end
NAME_MAX = 255


def rel_path_problem(rel_path: str) -> str | None:
    """Why a relative path cannot be a file under the local copy, or None."""
    parts = rel_path.split("/")
    if not rel_path or rel_path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path (empty, absolute, '.' or '..')"
    if "\0" in rel_path:
        return "contains a NUL byte"
    if any(len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts):
        return f"a name longer than {NAME_MAX} bytes"
    return None


def wanted(rel_path: str, extensions: Sequence[str]) -> bool:
    """The scan's rule: a matching extension (any case), no hidden file or folder."""
    if any(part.startswith(".") for part in rel_path.split("/")):
        return False
    return posixpath.splitext(rel_path)[1].lower() in extensions


def list_dataset(fetcher: Fetcher, extensions: Sequence[str], workers: int
                 ) -> tuple[RemoteEntry, ...]:
    """Every wanted file under the store's root, sorted by relative path."""
    store = fetcher.store
    if store.is_http:
        found = _list_http(fetcher, extensions, workers)
    else:
        infos = fetcher.call(f"cannot list {store.protocol}://{store.root}", store.fs.find,
                             store.root, detail=True)
        prefix = store.root + "/"
        found = [entry_from_info(name[len(prefix):], name, info)
                 for name, info in sorted(infos.items())
                 if name.startswith(prefix) and wanted(name[len(prefix):], extensions)]
    return _usable(found, store.root)


def _list_http(fetcher: Fetcher, extensions: Sequence[str], workers: int) -> list[RemoteEntry]:
    """Walk the HTML listings (nginx autoindex, Python's http.server), then HEAD each file for
    its size and tag (a listing page gives neither)."""

    store = fetcher.store
    files: list[tuple[str, str]] = []  # (rel_path, url)
    pending, seen = [(store.root + "/", 0)], set()
    while pending:
        folder, depth = pending.pop()
        if folder in seen:
            continue
        if len(seen) == MAX_HTTP_FOLDERS:
            raise RemoteError(f"{store.root}: more than {MAX_HTTP_FOLDERS} folders listed; "
                              f"give a manifest")
        seen.add(folder)
        for item in fetcher.call(f"cannot list {folder}", store.fs.ls, folder, detail=True):
            url = item["name"]
            if not url.startswith(store.root + "/"):
                continue  # a link out of the dataset
            rel = unquote(url[len(store.root) + 1:], errors="surrogateescape").rstrip("/")
            if item["type"] == "directory":
                if depth < MAX_HTTP_DEPTH and not rel.rsplit("/", 1)[-1].startswith("."):
                    pending.append((url, depth + 1))
            elif wanted(rel, extensions):
                files.append((rel, url))
    files.sort()
    return parallel_map(fetcher, lambda item: fetcher.info(item[1], item[0]), files, workers)


def parse_manifest(text: str, where: str, extensions: Sequence[str]) -> list[str]:
    """The relative paths a manifest lists, one per line; blank lines and `#` comments are
    skipped, paths without a wanted extension too (as in a folder)."""
    paths: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        rel = line.strip()
        if not rel or rel.startswith("#"):
            continue
        rel = rel.removeprefix("./")
        problem = rel_path_problem(rel)
        if problem:
            raise RemoteError(f"{where}:{number}: {rel!r}: {problem}")
        if rel in seen:
            raise RemoteError(f"{where}:{number}: {rel!r} is listed already on line {seen[rel]}")
        seen[rel] = number
        if wanted(rel, extensions):
            paths.append(rel)
    return paths


def read_manifest(manifest: str, fetcher_for: Any, extensions: Sequence[str]) -> list[str]:
    """The manifest's paths; `manifest` is a local path or a URL, read with the fetcher that
    `fetcher_for(url)` gives."""
    if "://" in manifest:
        fetcher = fetcher_for(manifest)
        raw = fetcher.call(f"cannot read the manifest {manifest}", fetcher.store.fs.cat_file,
                           fetcher.store.root)
    else:
        try:
            if os.path.getsize(manifest) > MAX_MANIFEST_BYTES:
                raise RemoteError(f"manifest {manifest} is larger than {MAX_MANIFEST_BYTES} bytes")
            with open(manifest, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise RemoteError(f"cannot read the manifest {manifest}: {exc.strerror}") from exc
    if len(raw) > MAX_MANIFEST_BYTES:
        raise RemoteError(f"manifest {manifest} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteError(f"manifest {manifest} is not UTF-8 text") from exc
    return parse_manifest(text, manifest, extensions)


def manifest_entries(fetcher: Fetcher, rel_paths: Sequence[str], workers: int
                     ) -> tuple[RemoteEntry, ...]:
    """Look up each listed file (one HEAD each): no listing of the store is needed."""

    store = fetcher.store
    found = parallel_map(fetcher, lambda rel: fetcher.info(store.path_of(rel), rel),
                         sorted(rel_paths), workers)
    return _usable(found, store.root)


def _usable(entries: Sequence[RemoteEntry], root: str) -> tuple[RemoteEntry, ...]:
    """Entries that can be files of the local copy; the others are logged and left out (a key
    with '..', a file that is also a folder of another key)."""
    folders = {posixpath.dirname(e.rel_path) for e in entries}
    folders |= {f for folder in list(folders) for f in _ancestors(folder)}
    usable = []
    for entry in entries:
        problem = rel_path_problem(entry.rel_path)
        if problem is None and entry.rel_path in folders:
            problem = "also the name of a folder of other files"
        if problem:
            log.warning("remote dataset %s: leaving out %r: %s", root, entry.rel_path, problem)
            continue
        usable.append(entry)
    return tuple(sorted(usable, key=lambda e: e.rel_path))


def _ancestors(folder: str) -> list[str]:
    parts = folder.split("/") if folder else []
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
