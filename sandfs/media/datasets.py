"""Scanning every dataset of a mount: one scan per (dataset root, extensions), however many
tasks read it."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from functools import partial
from threading import Event

from sandfs.media.scan import scan_dataset
from sandfs.media.scan_workers import ProbeWorkers, check_stop
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
