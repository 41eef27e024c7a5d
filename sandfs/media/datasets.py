"""Scanning every dataset of a mount: one scan per (dataset root, extensions), however many
tasks read it; `ScanAhead` starts it before the daemon imports and mounts. A daemon's scans are
lazy (`LazyScans`): they return once the datasets are listed, their probes go on behind the
first batches (docs/contract.md#lazy-scan)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from functools import partial
from threading import Event

from sandfs.errors import UserError
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.scan_workers import (
    DEFAULT_PACE,
    STOP_POLL_SECONDS,
    ProbeWorkers,
    ScanPace,
    ScanStopped,
    check_stop,
)
from sandfs.media.types import BadVideo, DatasetScan, MediaLimits, ScanProgress
from sandfs.runtime import collector_paused, settle_collector

log = logging.getLogger(__name__)

DatasetKey = tuple[str, tuple[str, ...]]  # (dataset root, extensions)
DatasetProgress = Callable[[DatasetKey, ScanProgress], None]


def scan_all(datasets: Iterable[DatasetKey], cache_dir: str | None, workers: int,
             limits: MediaLimits, progress: DatasetProgress | None = None,
             stop: Event | None = None, started: ProbeWorkers | None = None,
             lazy: LazyScans | None = None, pace: ScanPace = DEFAULT_PACE
             ) -> dict[DatasetKey, DatasetScan]:
    """Unchanged files come from the scan index kept in `cache_dir` (None: no index);
    `progress(key, ScanProgress)` hears how far each dataset's scan is (see `scan_dataset`).
    Raises ScanStopped soon after `stop` is set (from another thread). `started`: probe
    workers started ahead, for the first dataset that needs any. `lazy`: the scans return once
    listed and probe on in its threads (`start_lazy_scan`), at `pace`. No cyclic collection
    while a dataset is listed, and its listing frozen after (`settle_collector`): a few objects
    a file that live as long as the mount, which the collector walked again and again as they
    were made and at each full collection after (250,000 files listed from the scan index:
    7.5-8.6 CPU-s with the collector on, 2.6-2.7 with it off)."""
    scans: dict[DatasetKey, DatasetScan] = {}
    for key in datasets:
        if key in scans:
            continue
        check_stop(stop)
        options = dict(limits=limits, workers=workers, started=started,
                       progress=None if progress is None else partial(progress, key),
                       index_path=index_path(cache_dir, key) if cache_dir else None)
        if lazy is not None:
            with collector_paused():
                scans[key] = found = lazy.start(key, pace=pace, **options)
                settle_collector()  # before the collector is on: its first pass walked them all
            log.info("dataset %s: %d files listed, %d left out, %d known from the index", key[0],
                     len(found.listed or ()), len(found.bad), found.probes.answered)
            continue
        scans[key] = found = scan_dataset(key[0], key[1], stop=stop, **options)
        log.info("dataset %s: %d usable videos, %d left out", key[0], len(found.videos),
                 len(found.bad))
    return scans


def index_path(cache_dir: str, key: DatasetKey) -> str:
    """Where the scan index of a dataset is kept."""
    return os.path.join(cache_dir, f"scan-{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}.json")


class ScanBook:
    """The scans of a live mount: one per dataset key that a task reads or a registration is
    planning with (`held`). A scan no task uses any more is forgotten, in memory and its index
    file, when the next one is taken; an owner other than root and the daemon's user holds at
    most `limits.max_scans_per_owner` scans made for them. Thread-safe: registrations plan in
    worker threads."""

    def __init__(self, scans: dict[DatasetKey, DatasetScan], cache_dir: str | None,
                 workers: int, limits: MediaLimits) -> None:
        self._scans = scans  # the mount's own, made at startup
        self._made_for: dict[DatasetKey, int] = {}  # uid whose registration made a scan
        self._held: dict[DatasetKey, int] = {}  # registrations planning with each key now
        self._lock = threading.Lock()
        self.cache_dir, self.workers, self.limits = cache_dir, workers, limits

    @contextmanager
    def held(self, key: DatasetKey, uid: int, in_use: Callable[[], set[DatasetKey]],
             privileged: bool) -> Iterator[DatasetScan]:
        """The scan of `key`, made now if unknown, kept while the block runs; `in_use()`: the
        keys of the mount's tasks (asked under the lock: a registration that held a key has
        joined its task by the time it lets go)."""
        with self._lock:
            self._forget(in_use())
            if key not in self._scans:
                self._check_quota(uid, privileged)
            self._held[key] = self._held.get(key, 0) + 1
        try:
            found = self._scans.get(key)
            if found is None:
                found = scan_all([key], self.cache_dir, self.workers, self.limits)[key]
                with self._lock:
                    self._scans.setdefault(key, found)
                    self._made_for.setdefault(key, uid)
            yield found
        finally:
            with self._lock:
                self._held[key] -= 1
                if not self._held[key]:
                    del self._held[key]

    def __contains__(self, key: DatasetKey) -> bool:
        return key in self._scans

    def _check_quota(self, uid: int, privileged: bool) -> None:
        mine = sum(by == uid for by in self._made_for.values())
        if not privileged and mine >= self.limits.max_scans_per_owner:
            raise UserError(f"uid {uid} already holds {mine} dataset scans, the most a user "
                            f"may (SANDFS_MAX_SCANS_PER_OWNER={self.limits.max_scans_per_owner}"
                            f"): remove a task on another dataset first")

    def _forget(self, in_use: set[DatasetKey]) -> None:
        for key in [k for k in self._scans if k not in in_use and k not in self._held]:
            del self._scans[key]
            self._made_for.pop(key, None)
            if self.cache_dir:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(index_path(self.cache_dir, key))
            log.info("dataset %s: no task reads it any more, its scan is forgotten", key[0])


class LazyScans:
    """The probes of a mount's lazy scans, one thread each; `close` (or setting `stop`) ends
    them. Owned by whoever serves their plans: waiters on a probe get ScanStopped once
    stopped."""

    def __init__(self, stop: Event) -> None:
        self.stop = stop
        self._threads: list[threading.Thread] = []

    def start(self, key: DatasetKey, **options) -> DatasetScan:
        found, thread = start_lazy_scan(key[0], key[1], stop=self.stop, **options)
        self._threads.append(thread)
        return found

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()


class ScanBad(Sequence[BadVideo]):
    """The files the scans left out so far: refused by name or stat when listed, or by their
    probe (a lazy scan's grow as it probes). What status.json's `bad_videos` lists."""

    def __init__(self, scans: dict[DatasetKey, DatasetScan]) -> None:
        self._scans = scans

    def _now(self) -> list[BadVideo]:
        found = []
        for scan in self._scans.values():
            book = scan.probes
            found += [b for b in scan.bad if book is None or book.known(b.rel_path) is None]
            found += [] if book is None else book.bad()
        return found

    def __len__(self) -> int:
        return len(self._now())

    def __getitem__(self, index):  # type: ignore[override]
        return self._now()[index]

    def __iter__(self) -> Iterator[BadVideo]:
        return iter(self._now())


class ScanAhead:
    """The scan of a mount's local datasets, started in a thread as soon as the configs, the
    layout and the cache dir are checked: its probes run on the other core while the daemon
    imports and mounts, and the daemon takes the listings (`join`) where it would have started
    scanning; their probes go on until `close`. What the scan reported before the daemon
    listened is replayed to it. `probes` (started ahead) are the scan's; `close` (also on
    leaving the `with` block) stops the probes, and a scan no one took."""

    def __init__(self, datasets: Iterable[DatasetKey], cache_dir: str | None, workers: int,
                 limits: MediaLimits, probes: ProbeWorkers, pace: ScanPace = DEFAULT_PACE
                 ) -> None:
        self._stop = Event()
        self._lock = threading.Lock()  # progress is heard in the scan's thread
        self._heard: dict[DatasetKey, ScanProgress] = {}
        self._listener: DatasetProgress | None = None
        self._lazy = LazyScans(self._stop)  # the probes go on after `join`, until `close`
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="scan-ahead")
        self._scans: Future[dict[DatasetKey, DatasetScan]] = self._executor.submit(
            self._scan, list(datasets), cache_dir, workers, limits, probes, pace)

    def _scan(self, datasets: list[DatasetKey], cache_dir: str | None, workers: int,
              limits: MediaLimits, probes: ProbeWorkers, pace: ScanPace
              ) -> dict[DatasetKey, DatasetScan]:
        with probes:  # a remote dataset's copy is scanned later, by fresh workers
            return scan_all(datasets, cache_dir, workers, limits, self._hear, stop=self._stop,
                            started=probes, lazy=self._lazy, pace=pace)

    def _hear(self, dataset: DatasetKey, progress: ScanProgress) -> None:
        with self._lock:  # held while the listener hears it: never out of order
            self._heard[dataset] = progress
            if self._listener is not None:
                self._listener(dataset, progress)

    def join(self, progress: DatasetProgress, stop: Event) -> dict[DatasetKey, DatasetScan]:
        """The datasets' scans, once done; `progress` hears how far they got, then the rest.
        Raises what the scan raised, and ScanStopped soon after `stop` is set."""
        def hear(dataset: DatasetKey, done: ScanProgress) -> None:
            progress(dataset, done)
            if stop.is_set():  # at once, not at the next poll: the scan may end before it
                self._stop.set()

        with self._lock:
            self._listener = hear
            for dataset, heard in self._heard.items():
                progress(dataset, heard)
        while True:
            if stop.is_set():
                self._stop.set()
            try:
                scans = self._scans.result(timeout=STOP_POLL_SECONDS)
            except FutureTimeout:
                continue
            check_stop(stop)  # it ended as the daemon stopped: stopped all the same
            return scans

    def close(self) -> None:
        self._stop.set()
        try:
            self._scans.result()
        except ScanStopped:
            pass
        except Exception as exc:  # raised to the daemon already, or moot: nobody took it
            log.debug("the scan ahead ended with %s: %s", type(exc).__name__, exc)
        self._executor.shutdown()
        self._lazy.close()

    def __enter__(self) -> ScanAhead:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
