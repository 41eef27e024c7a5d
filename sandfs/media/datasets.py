"""Scanning every dataset of a mount: one scan per (dataset root, extensions), however many
tasks read it; `ScanAhead` starts it before the daemon imports and mounts."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from threading import Event

from sandfs.media.scan import scan_dataset
from sandfs.media.scan_workers import STOP_POLL_SECONDS, ProbeWorkers, ScanStopped, check_stop
from sandfs.media.types import BadVideo, DatasetScan, MediaLimits, ScanProgress

log = logging.getLogger(__name__)

DatasetKey = tuple[str, tuple[str, ...]]  # (dataset root, extensions)
DatasetProgress = Callable[[DatasetKey, ScanProgress], None]


def scan_all(datasets: Iterable[DatasetKey], cache_dir: str | None, workers: int,
             limits: MediaLimits, progress: DatasetProgress | None = None,
             stop: Event | None = None, started: ProbeWorkers | None = None,
             ) -> dict[DatasetKey, DatasetScan]:
    """Unchanged files come from the scan index kept in `cache_dir` (None: no index);
    `progress(key, ScanProgress)` hears how far each dataset's scan is (see `scan_dataset`).
    Raises ScanStopped soon after `stop` is set (from another thread). `started`: probe
    workers started ahead, for the first dataset that needs any."""
    scans: dict[DatasetKey, DatasetScan] = {}
    for key in datasets:
        if key in scans:
            continue
        check_stop(stop)
        tag = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        scans[key] = found = scan_dataset(
            key[0], key[1], limits=limits, workers=workers, stop=stop, started=started,
            progress=None if progress is None else partial(progress, key),
            index_path=os.path.join(cache_dir, f"scan-{tag}.json") if cache_dir else None,
        )
        log.info("dataset %s: %d usable videos, %d left out", key[0], len(found.videos),
                 len(found.bad))
    return scans


def bad_videos(scans: dict[DatasetKey, DatasetScan]) -> list[BadVideo]:
    return [b for found in scans.values() for b in found.bad]


class ScanAhead:
    """The scan of a mount's local datasets, started in a thread as soon as the configs, the
    layout and the cache dir are checked: its probes run on the other core while the daemon
    imports and mounts, and the daemon takes the result (`join`) where it would have started
    scanning. What the scan reported before the daemon listened is replayed to it. `probes`
    (started ahead) are the scan's, closed when it ends; `close` (also on leaving the `with`
    block) stops a scan no one took."""

    def __init__(self, datasets: Iterable[DatasetKey], cache_dir: str | None, workers: int,
                 limits: MediaLimits, probes: ProbeWorkers) -> None:
        self._stop = Event()
        self._lock = threading.Lock()  # progress is heard in the scan's thread
        self._heard: dict[DatasetKey, ScanProgress] = {}
        self._listener: DatasetProgress | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="scan-ahead")
        self._scans: Future[dict[DatasetKey, DatasetScan]] = self._executor.submit(
            self._scan, list(datasets), cache_dir, workers, limits, probes)

    def _scan(self, datasets: list[DatasetKey], cache_dir: str | None, workers: int,
              limits: MediaLimits, probes: ProbeWorkers) -> dict[DatasetKey, DatasetScan]:
        with probes:  # a remote dataset's copy is scanned later, by fresh workers
            return scan_all(datasets, cache_dir, workers, limits, self._hear, stop=self._stop,
                            started=probes)

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

    def __enter__(self) -> ScanAhead:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
