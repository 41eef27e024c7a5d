"""A mount's way from mounted to serving its tasks.

The daemon mounts first and scans its datasets after, in the running loop: a daemon restarted
over a stale mount must not show its readers an empty directory (ENOENT) for the whole scan.
Until the tasks are planned, a request that needs them waits on `Startup.wait` (bounded by the
scan alone; a failure or a stop releases it with NotServing), while status.json answers at once
with the scan's progress (`status_for`) and the directories of the tasks the configs name
answer from `tasks` (their names and owners are known before the scan). The scan runs in a
worker thread: it reports progress through `scanning`/`scanned`/`enter` and watches
`stop_scan`; everything else is called in the trio loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import replace

import trio

from sandfs.access import Owner
from sandfs.media.datasets import DatasetKey
from sandfs.media.types import ScanProgress
from sandfs.ops import isolated
from sandfs.remote.stats import RemoteStats
from sandfs.service import ViewService
from sandfs.status import DatasetScanStatus, MountStatus, ScanStatus

log = logging.getLogger(__name__)


class NotServing(Exception):
    """The mount stopped (its startup failed, or it was unmounted or signalled) before it
    served its tasks."""


class OwnRequest(NotServing):
    """The daemon itself asked for its tasks through its own mount before serving them (say,
    its scan followed a link into the mount): waiting would wait on itself."""


class Startup:
    def __init__(self, *, workers: int, memory_limit_bytes: int,
                 tasks: Mapping[str, Owner] | None = None) -> None:
        self.started = time.monotonic()
        self.workers = workers
        self.memory_limit_bytes = memory_limit_bytes
        self.tasks = dict(tasks or {})  # the configs' tasks and owners: known before the scan
        self.service: ViewService | None = None  # once the tasks are planned
        self.failure: Exception | None = None  # why the startup failed (raised once unmounted)
        self.stop_scan = threading.Event()  # set: a scan still running stops (ScanStopped)
        self._settled = trio.Event()  # serving, failed or stopped: waiters go on
        self._lock = threading.Lock()  # the scan's thread writes what status.json reads
        self._phase = "scanning"
        self._datasets: dict[DatasetKey, DatasetScanStatus] = {}
        self._took: float | None = None  # seconds from mount to serving, once it serves

    @classmethod
    def serving(cls, service: ViewService) -> Startup:
        """One that serves `service` already (the FUSE layer over a service built in-process)."""
        startup = cls(workers=service.engine.workers, memory_limit_bytes=0)
        startup.started = service.started
        startup.serve(service)
        return startup

    # -- from the scan's thread --------------------------------------------------------------

    def enter(self, phase: str) -> None:
        with self._lock:
            self._phase = phase

    def scanning(self, datasets: list[DatasetKey]) -> None:
        """The datasets about to be scanned, none of their files listed yet."""
        with self._lock:
            self._phase = "scanning"
            self._datasets = {key: DatasetScanStatus(key[0], key[1]) for key in datasets}

    def scanned(self, dataset: DatasetKey, progress: ScanProgress) -> None:
        with self._lock:
            self._datasets[dataset] = replace(self._datasets[dataset],
                                              videos_scanned=progress.videos_scanned,
                                              videos_total=progress.videos_total)

    # -- in the trio loop --------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.service is not None

    def serve(self, service: ViewService) -> None:
        with self._lock:
            self.service, self._phase = service, "ready"
            self._took = time.monotonic() - self.started
        self._settled.set()

    def fail(self, error: Exception) -> None:
        """The startup failed: waiters get NotServing, the daemon unmounts and raises `error`."""
        self.failure = error
        self._end("failed")

    def stop(self) -> None:
        """Unmounted or signalled: a scan still running stops, waiters get NotServing."""
        if not self._settled.is_set():
            self._end("stopped")

    def _end(self, phase: str) -> None:
        self.enter(phase)
        self.stop_scan.set()
        self._settled.set()

    async def wait(self, caller: int = 0) -> ViewService:
        """The service, once the tasks are planned; NotServing if the mount stops first.
        `caller`: the thread id a FUSE request comes from (0: unknown); one of this process's
        gets OwnRequest at once."""
        if not self._settled.is_set() and caller > 0 and is_own_thread(caller):
            log.warning("thread %d of the daemon asked its mount for the tasks before they "
                        "were planned: refused (EDEADLK)", caller)
            raise OwnRequest("a request from the daemon itself")
        await self._settled.wait()
        if self.service is None:
            raise NotServing(f"the mount stopped before it served ({self._phase})")
        return self.service

    # -- status.json -------------------------------------------------------------------------

    def scan_status(self) -> ScanStatus:
        with self._lock:
            took = self._took if self._took is not None else time.monotonic() - self.started
            datasets = tuple(self._datasets.values())
            phase = self._phase
        error = None if self.failure is None else str(self.failure)
        return ScanStatus.of(phase, took, datasets, error)

    def status_for(self, viewer: int | None = None) -> MountStatus:
        """The mount's state as user `viewer` may see it (None: all of it), its scan included."""
        if self.service is not None:
            return self.service.status_for(viewer)
        record = MountStatus.starting(
            uptime_seconds=time.monotonic() - self.started, pid=os.getpid(),
            workers=self.workers, memory_limit_bytes=self.memory_limit_bytes,
            remote=RemoteStats().as_status(), isolated_ops=isolated.status(),
            scan=self.scan_status())
        return record if viewer is None else record.seen_by(set(), set())

    def status_record(self) -> MountStatus:
        return self.status_for(None)

    def status_bytes(self, viewer: int | None = None) -> bytes:
        return self.status_for(viewer).to_bytes()


def is_own_thread(tid: int) -> bool:
    return os.path.exists(f"/proc/self/task/{tid}")


def as_startup(source: ViewService | Startup) -> Startup:
    return source if isinstance(source, Startup) else Startup.serving(source)
