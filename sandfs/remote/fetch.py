"""Requests to the store with bounded retries, and fetching one file into the local copy.

Every request goes through `Fetcher.call`: a failure a retry may cure (refused, reset, timed
out, 5xx) is retried with exponential backoff, at most `RetryPolicy.attempts` times; each
request waits at most the store's timeout, so a dead store fails the mount in bounded time.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sandfs.remote.connect import RemoteError, Store, describe_error, is_retryable
from sandfs.remote.entries import RemoteEntry, entry_from_info
from sandfs.remote.stats import RemoteStats

__all__ = ["Fetcher", "RetryPolicy", "parallel_map"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4  # tries per request, the first included
    base_delay_s: float = 0.5  # wait before the first retry; doubles each time
    max_delay_s: float = 8.0

    def delay_s(self, retry: int) -> float:
        return min(self.base_delay_s * 2**retry, self.max_delay_s)


class Fetcher:
    """Thread-safe: the prepare runs listing and fetches from a pool of threads."""

    def __init__(self, store: Store, policy: RetryPolicy) -> None:
        self.store = store
        self.policy = policy
        self._lock = threading.Lock()
        self._stats = RemoteStats()
        self._cancelled = threading.Event()

    def stats(self) -> RemoteStats:
        with self._lock:
            return self._stats

    def count(self, **amounts: int) -> None:
        with self._lock:
            self._stats = replace(self._stats, **{
                name: getattr(self._stats, name) + n for name, n in amounts.items()})

    def cancel(self) -> None:
        """Stop retrying: another request failed for good and the prepare is over."""
        self._cancelled.set()

    def call(self, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """`fn(*args, **kwargs)`, one request, retried; `what` names it in the error."""
        for attempt in range(self.policy.attempts):
            if attempt:
                self.count(retries=1)
                if self._cancelled.wait(self.policy.delay_s(attempt - 1)):
                    break
            if self._cancelled.is_set():
                break
            self.count(requests=1)
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                self.count(errors=1)
                if not is_retryable(exc) or attempt + 1 == self.policy.attempts:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise RemoteError(f"{what}: {describe_error(exc)}{tries}") from exc
        raise RemoteError(f"{what}: cancelled, another request failed")

    def info(self, entry_path: str, rel_path: str) -> RemoteEntry:
        info = self.call(f"cannot stat {entry_path}", self.store.fs.info, entry_path)
        return entry_from_info(rel_path, entry_path, info)

    def fetch(self, entry: RemoteEntry, dest: str, temp_dir: str) -> RemoteEntry:
        """Download `entry` to `dest` atomically (a temp file in `temp_dir`, then rename;
        nothing is left behind on failure). A size other than the listed one means the file
        changed on the store: it is looked up again, kept if it now has the size received,
        and the entry returned carries its new size and tag."""
        fd, temp = tempfile.mkstemp(suffix=".part", dir=temp_dir)
        os.close(fd)
        try:
            for _ in range(self.policy.attempts):
                self.call(f"cannot fetch {entry.path}", self.store.fs.get_file, entry.path,
                          temp, callback=_byte_counter(self), **self.store.get_kwargs())
                got = os.path.getsize(temp)
                if got != entry.size_bytes:  # changed on the store, or a cut connection
                    fresh = self.info(entry.path, entry.rel_path)
                    if fresh != entry:
                        self.count(files_changed=1)
                    entry = fresh
                    if entry.size_bytes != got:
                        continue  # read it again as it is now
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.replace(temp, dest)
                return entry
            raise RemoteError(f"{entry.path} keeps changing while it is fetched")
        finally:
            if os.path.exists(temp):
                os.unlink(temp)


def _byte_counter(fetcher: Fetcher) -> Any:
    """An fsspec callback counting the bytes received (also those of a failed attempt)."""
    from fsspec.callbacks import Callback

    class ByteCounter(Callback):
        def relative_update(self, inc: int = 1) -> None:
            fetcher.count(bytes_fetched=inc)

    return ByteCounter()


def parallel_map(fetcher: Fetcher, fn: Callable[[T], R], items: Iterable[T],
                 workers: int) -> list[R]:
    """`fn` over `items` on `workers` threads, in order; the first failure cancels the rest
    (those in flight end their current request) and is raised."""
    workers = max(1, workers)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandfs-remote") as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            return [future.result() for future in futures]
        except BaseException:
            fetcher.cancel()
            for future in futures:
                future.cancel()
            raise
