"""The local copy of a remote dataset: `CACHE_DIR/remote/<digest>/<relative path>`.

`prepare_remote_dataset` lists the store, fetches each listed video that the copy does not hold
as listed (same size and tag), deletes what the store no longer lists, and returns the folder:
the scan, the plan and the mount then treat it as a local dataset. A journal of fetched files
(`<digest>.journal`, one JSON line per file, appended as each lands) makes a remount fetch
nothing unchanged and an interrupted prepare resume where it stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandfs.remote.connect import RemoteError, open_store
from sandfs.remote.fetch import Fetcher, RetryPolicy, parallel_map
from sandfs.remote.options import check_dataset_url, check_storage_options, endpoint_of
from sandfs.remote.source import RemoteEntry, list_dataset, manifest_entries, read_manifest
from sandfs.remote.stats import RemoteStats

__all__ = [
    "FetchProgress", "LocalCopy", "dataset_digest", "log_progress", "prepare_remote_dataset",
]

log = logging.getLogger(__name__)

JOURNAL_VERSION = 1
DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class FetchProgress:
    files_done: int
    files_total: int  # files to fetch in this prepare (not those reused)
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True, slots=True)
class LocalCopy:
    url: str
    digest: str
    root: str  # the local folder to scan as the dataset
    entries: tuple[RemoteEntry, ...]  # sorted by relative path, as fetched
    bytes_on_disk: int  # the videos' bytes: they count against the storage budget
    changed: tuple[str, ...]  # relative paths the store changed since an earlier fetch or
    # between the listing and the fetch
    stats: RemoteStats


def log_progress(url: str, every_s: float = 10.0) -> Callable[[FetchProgress], None]:
    """A `progress` callback that logs how far a long fetch is, at most every `every_s`."""
    last = [time.monotonic()]

    def report(state: FetchProgress) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s or state.files_done == state.files_total:
            last[0] = now
            log.info("remote dataset %s: fetched %d of %d files (%d of %d bytes)", url,
                     state.files_done, state.files_total, state.bytes_done, state.bytes_total)

    return report


def dataset_digest(url: str, storage_options: Mapping[str, Any], manifest: str | None,
                   extensions: Sequence[str]) -> str:
    """Names the copy: what selects the files (credentials do not)."""
    key = [check_dataset_url(url), endpoint_of(storage_options), manifest,
           sorted(e.lower() for e in extensions)]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def prepare_remote_dataset(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None,
    manifest: str | None,
    cache_dir: str,
    extensions: Sequence[str],
    timeout_s: float = 10.0,
    budget_bytes: int | None = None,
    keep: Collection[str] = (),
    workers: int = 4,
    retry: RetryPolicy = DEFAULT_RETRY,
    progress: Callable[[FetchProgress], None] | None = None,
) -> LocalCopy:
    """Fetch the dataset at `url` into `cache_dir` (once) and return its local copy.

    `manifest`: a local path or URL of a text file listing the relative paths (no listing of
    the store then). `budget_bytes`: the storage budget; the videos must fit in it, and copies
    of other datasets (except the digests in `keep`, used by the same mount) are deleted,
    least recently used first, to make room. Each request waits at most `timeout_s` and is
    tried `retry.attempts` times; any failure is a `RemoteError` with a one-line message.
    """
    url = check_dataset_url(url)
    options = check_storage_options(storage_options)
    extensions = tuple(e.lower() for e in extensions)
    digest = dataset_digest(url, options, manifest, extensions)
    base = os.path.join(cache_dir, "remote")
    os.makedirs(base, mode=0o700, exist_ok=True)
    paths = _CopyPaths(base, digest)
    with _locked(paths.lock, url):
        fetcher = Fetcher(open_store(url, options, timeout_s), retry)

        def fetcher_for(other_url: str) -> Fetcher:
            other = Fetcher(open_store(check_dataset_url(other_url), options, timeout_s), retry)
            return fetcher if other.store.root == fetcher.store.root else other

        if manifest is None:
            entries = list_dataset(fetcher, extensions, workers)
        else:
            rel_paths = read_manifest(manifest, fetcher_for, extensions)
            entries = manifest_entries(fetcher, rel_paths, workers)
        if not entries:
            raise RemoteError(f"{url}: no files with the extensions {', '.join(extensions)} "
                              f"found" + (f" in the manifest {manifest}" if manifest else ""))
        return _sync(url, digest, paths, fetcher, entries, budget_bytes, keep, workers,
                     progress)


@dataclass(frozen=True, slots=True)
class _CopyPaths:
    base: str
    digest: str

    @property
    def root(self) -> str:
        return os.path.join(self.base, self.digest)

    @property
    def journal(self) -> str:
        return os.path.join(self.base, f"{self.digest}.journal")

    @property
    def temp(self) -> str:
        return os.path.join(self.base, f"{self.digest}.tmp")

    @property
    def lock(self) -> str:
        return os.path.join(self.base, f"{self.digest}.lock")


@contextlib.contextmanager
def _locked(path: str, url: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RemoteError(f"{url}: another sandfs is fetching this dataset into the same "
                              f"cache dir") from None
        yield
    finally:
        os.close(fd)


def _sync(url: str, digest: str, paths: _CopyPaths, fetcher: Fetcher,
          entries: tuple[RemoteEntry, ...], budget_bytes: int | None, keep: Collection[str],
          workers: int, progress: Callable[[FetchProgress], None] | None) -> LocalCopy:
    shutil.rmtree(paths.temp, ignore_errors=True)  # partial files of an interrupted prepare
    os.makedirs(paths.temp, mode=0o700)
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    fetched = _read_journal(paths.journal)
    reused = {e.rel_path: fetched[e.rel_path] for e in entries
              if _still_valid(paths.root, e, fetched.get(e.rel_path))}
    changed = tuple(e.rel_path for e in entries if e.rel_path in fetched
                    and (fetched[e.rel_path]["size"], fetched[e.rel_path]["etag"])
                    != (e.size_bytes, e.etag))
    if changed:
        log.warning("remote dataset %s: %d files changed on the store since they were fetched "
                    "(%s%s): fetching them again", url, len(changed), ", ".join(changed[:3]),
                    ", ..." if len(changed) > 3 else "")
    todo = [e for e in entries if e.rel_path not in reused]
    total = sum(e.size_bytes for e in entries)
    _make_room(paths, url, total, sum(e.size_bytes for e in todo), budget_bytes, keep)
    _remove_stale(paths.root, {e.rel_path for e in entries})
    journal = _Journal(paths.journal, url, list(reused.values()))
    log.info("remote dataset %s: %d files (%d bytes); fetching %d (%d bytes) into %s",
             url, len(entries), total, len(todo), sum(e.size_bytes for e in todo), paths.root)
    counter = _Progress(len(todo), sum(e.size_bytes for e in todo), progress)

    def fetch_one(entry: RemoteEntry) -> RemoteEntry:
        dest = os.path.join(paths.root, entry.rel_path)
        got = fetcher.fetch(entry, dest, paths.temp)
        journal.append(got, os.stat(dest).st_mtime_ns)
        counter.done(got.size_bytes)
        return got

    try:
        done = {e.rel_path: e for e in parallel_map(fetcher, fetch_one, todo, workers)}
    finally:
        journal.close()
        shutil.rmtree(paths.temp, ignore_errors=True)
    final = tuple(done.get(e.rel_path, e) for e in entries)
    during = {e.rel_path for e in todo if done[e.rel_path] != e}  # counted by the fetcher
    fetcher.count(files_fetched=len(todo), files_reused=len(reused),
                  files_changed=len(changed))
    return LocalCopy(url=url, digest=digest, root=paths.root, entries=final,
                     bytes_on_disk=sum(e.size_bytes for e in final),
                     changed=tuple(sorted(set(changed) | during)), stats=fetcher.stats())


def _still_valid(root: str, entry: RemoteEntry, record: dict | None) -> bool:
    """Fetched before as the store lists it now, and untouched here since."""
    if record is None or (record["size"], record["etag"]) != (entry.size_bytes, entry.etag):
        return False
    try:
        info = os.stat(os.path.join(root, entry.rel_path))
    except OSError:
        return False
    return info.st_size == entry.size_bytes and info.st_mtime_ns == record["mtime_ns"]


def _read_journal(path: str) -> dict[str, dict]:
    records: dict[str, dict] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return records
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("ignoring the fetch journal %s: %s", path, exc)
        return records
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the torn last line of a killed prepare
        if isinstance(record, dict) and record.keys() == {"rel", "size", "etag", "mtime_ns"}:
            records[record["rel"]] = record
    return records


class _Journal:
    """Rewritten (atomically) with the records still valid, then appended as files land."""

    def __init__(self, path: str, url: str, records: Sequence[dict]) -> None:
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"version": JOURNAL_VERSION, "url": url}) + "\n")
            f.writelines(json.dumps(r) + "\n" for r in records)
        os.replace(temp, path)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._lock = threading.Lock()

    def append(self, entry: RemoteEntry, mtime_ns: int) -> None:
        record = {"rel": entry.rel_path, "size": entry.size_bytes, "etag": entry.etag,
                  "mtime_ns": mtime_ns}
        with self._lock:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class _Progress:
    def __init__(self, files: int, nbytes: int,
                 report: Callable[[FetchProgress], None] | None) -> None:
        self._lock = threading.Lock()
        self._state = FetchProgress(0, files, 0, nbytes)
        self._report = report

    def done(self, nbytes: int) -> None:
        with self._lock:
            s = self._state
            self._state = FetchProgress(s.files_done + 1, s.files_total,
                                        s.bytes_done + nbytes, s.bytes_total)
            if self._report:
                self._report(self._state)


def _remove_stale(root: str, listed: set[str]) -> None:
    """Files the store no longer lists go, so the scan sees what the store holds."""
    for folder, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.relpath(path, root).replace(os.sep, "/") not in listed:
                os.unlink(path)
        if folder != root and not os.listdir(folder):
            os.rmdir(folder)


def _make_room(paths: _CopyPaths, url: str, total: int, to_fetch: int,
               budget_bytes: int | None, keep: Collection[str]) -> None:
    """The videos count against the storage budget: the dataset must fit, and copies of
    datasets this mount does not use are deleted (least recently used first) to make room;
    then the disk must have room for what is still to fetch."""
    if budget_bytes is not None and total > budget_bytes:
        raise RemoteError(f"{url}: the dataset is {total} bytes, more than the storage budget "
                          f"({budget_bytes} bytes); raise --budget / engine.storage_budget")
    others = sorted(_other_copies(paths, keep), key=lambda c: c[0])
    used = total + sum(size for _, size, _ in others)
    while budget_bytes is not None and used > budget_bytes and others:
        _, size, digest = others.pop(0)
        log.info("remote: deleting the copy %s (%d bytes) to make room for %s", digest, size,
                 url)
        _delete_copy(_CopyPaths(paths.base, digest))
        used -= size
    free = shutil.disk_usage(paths.base).free
    if to_fetch > free:
        raise RemoteError(f"{url}: {to_fetch} bytes to fetch, but only {free} bytes free in "
                          f"{paths.base}")


def _other_copies(paths: _CopyPaths, keep: Collection[str]) -> list[tuple[float, int, str]]:
    """(last used, bytes, digest) of the other copies in the cache dir."""
    copies = []
    for name in os.listdir(paths.base):
        other = _CopyPaths(paths.base, name)
        if name == paths.digest or name in keep or not os.path.isdir(other.root) \
                or "." in name:
            continue
        try:
            last_used = os.stat(other.journal).st_mtime
        except OSError:
            last_used = 0.0
        size = sum(os.path.getsize(os.path.join(d, f))
                   for d, _, files in os.walk(other.root) for f in files)
        copies.append((last_used, size, name))
    return copies


def _delete_copy(paths: _CopyPaths) -> None:
    shutil.rmtree(paths.root, ignore_errors=True)
    shutil.rmtree(paths.temp, ignore_errors=True)
    for path in (paths.journal, paths.lock):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
