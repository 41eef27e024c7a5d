"""status.json: typed records of the mount's state, turned into JSON in one place."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

STATUS_VERSION = 1
COUNTERS = ("frames_decoded", "frames_decoded_independent", "views_materialized",
            "views_recomputed", "aug_ops", "aug_ops_independent", "crop_ops",
            "crop_ops_independent", "clips_recomputed", "frames_from_disk", "frames_carried",
            "clips_made_ahead")
EMPTY_CACHE = {"bytes_used": 0, "budget_bytes": 0, "objects": 0, "hits": 0, "misses": 0,
               "evictions": 0, "recomputed": 0, "corrupt_detected": 0}
SCAN_PHASES = ("scanning", "planning", "ready", "failed", "stopped")


@dataclass(frozen=True, slots=True)
class TaskStatus:
    epoch: int
    iteration: int
    ready_ahead: int
    views_served: int
    stall_seconds: float
    epochs: int
    iterations_per_epoch: int
    videos: int
    failed_views: int = 0  # views that could not be planned: they answer EIO
    view_error: str | None = None  # why the first of them failed
    videos_without_label: int = 0  # a labels CSV named none of these videos
    label_rows_without_video: int = 0  # rows of the labels CSV that name no video


@dataclass(frozen=True, slots=True)
class SchedulerStatus:
    jobs_done: int
    jobs_running: int
    workers_active: int
    views_ready: int
    views_planned: int
    evicted_unread: int
    rebuilt_from_disk: int
    demand_waiting: int  # readers blocked on a batch
    pending_jobs: int  # video jobs with clips not made yet
    memory_bytes: int
    memory_limit_bytes: int
    windows_in_parts: tuple[int, ...] = ()  # active windows not planned whole yet


@dataclass(frozen=True, slots=True)
class DatasetScanStatus:
    path: str  # the dataset root (a remote dataset's local copy)
    extensions: tuple[str, ...]
    videos_scanned: int = 0  # probed or found in the scan index
    videos_total: int | None = None  # None: its files are still being listed


@dataclass(frozen=True, slots=True)
class ScanStatus:
    """How far the mount is from serving its tasks (see `sandfs.startup`): one of SCAN_PHASES,
    and the videos of its datasets scanned so far."""

    phase: str
    seconds: float  # since the mount; once it serves, how long that took
    videos_scanned: int = 0
    videos_total: int | None = None  # None: some dataset's files are still being listed
    datasets: tuple[DatasetScanStatus, ...] = ()
    error: str | None = None  # why it failed (the mount then ends)

    @classmethod
    def of(cls, phase: str, seconds: float, datasets: tuple[DatasetScanStatus, ...],
           error: str | None = None) -> ScanStatus:
        totals = [d.videos_total for d in datasets]
        return cls(phase, seconds, sum(d.videos_scanned for d in datasets),
                   None if None in totals else sum(totals), datasets, error)

    def to_json(self) -> dict:
        return {"phase": self.phase, "seconds": round(self.seconds, 3),
                "videos_scanned": self.videos_scanned, "videos_total": self.videos_total,
                "datasets": [{**asdict(d), "extensions": list(d.extensions)}
                             for d in self.datasets],
                "error": self.error}


@dataclass(frozen=True, slots=True)
class BadVideoStatus:
    path: str
    reason: str
    detail: str
    task: str | None = None  # None: skipped by every task (the scan refused it)

    def to_json(self) -> dict:
        out = {"path": self.path, "reason": self.reason, "detail": self.detail}
        return out if self.task is None else {**out, "task": self.task}


@dataclass(frozen=True, slots=True)
class Failure:
    """A read the mount answered with EIO: a view, a frame or a source file of a task."""

    task: str
    path: str  # in the task's tree: "3/0/view", "videos/a/b.mp4", "videos/a/b/frame4/aug1"
    reason: str
    count: int = 1  # reads that failed this way

    def to_json(self) -> dict:
        return asdict(self)


class FailureLog:
    """The latest `limit` distinct failures, and how many reads failed in all."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self.total = 0
        self._entries: OrderedDict[tuple[str, str], Failure] = OrderedDict()

    def record(self, task: str, path: str, reason: str) -> None:
        self.total += 1
        seen = self._entries.pop((task, path), None)
        count = 1 if seen is None else seen.count + 1
        self._entries[(task, path)] = Failure(task, path, reason, count)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def entries(self) -> tuple[Failure, ...]:
        return tuple(self._entries.values())


@dataclass(frozen=True, slots=True)
class MountStatus:
    uptime_seconds: float
    pid: int
    workers: int
    ondemand_memory_bytes: int
    ondemand_waiting: int
    scheduler: SchedulerStatus
    tasks: Mapping[str, TaskStatus]
    counters: Mapping[str, int]  # the COUNTERS, from the mount's stats
    cache: Mapping[str, int]
    bad_videos: tuple[BadVideoStatus, ...]
    task_errors: Mapping[str, str]
    remote: Mapping[str, int]  # fetching remote datasets: bytes_fetched, requests, errors, ...
    isolated_ops: Mapping[str, object]  # custom steps run out of process: workers, failures
    failures: tuple[Failure, ...] = ()
    failures_total: int = 0
    state_files_rebuilt: int = 0  # plan checkpoint or scan index found damaged, rebuilt
    scan: ScanStatus | None = None  # None: not known to this record (the daemon adds it)
    ondemand_memory_limit_bytes: int = 0  # the on-demand objects' share of memory_limit
    execution: str | None = None  # where video jobs run (None: not known while scanning)

    @property
    def memory_bytes(self) -> int:
        """Batches and frames the scheduler holds, and objects made on demand."""
        return self.ondemand_memory_bytes + self.scheduler.memory_bytes

    @property
    def memory_limit_bytes(self) -> int:
        """memory_limit: the scheduler's share and the on-demand objects' share."""
        return self.ondemand_memory_limit_bytes + self.scheduler.memory_limit_bytes

    @classmethod
    def starting(cls, *, uptime_seconds: float, pid: int, workers: int, memory_limit_bytes: int,
                 remote: Mapping[str, int], isolated_ops: Mapping[str, object],
                 scan: ScanStatus) -> MountStatus:
        """The record while the datasets are scanned: no task yet, every figure zero."""
        idle = SchedulerStatus(**dict.fromkeys(SchedulerStatus.__slots__, 0)
                               | {"memory_limit_bytes": memory_limit_bytes})
        return cls(uptime_seconds=uptime_seconds, pid=pid, workers=workers,
                   ondemand_memory_bytes=0, ondemand_waiting=0, scheduler=idle, tasks={},
                   counters=dict.fromkeys(COUNTERS, 0), cache=EMPTY_CACHE, bad_videos=(),
                   task_errors={}, remote=remote, isolated_ops=isolated_ops, scan=scan)

    def seen_by(self, tasks: set[str], task_errors: set[str]) -> MountStatus:
        """What a user who owns `tasks` (and wrote the files of `task_errors`) may see: those
        tasks, their bad videos and failures; nothing that names another user's files (the
        scan's own bad videos and dataset paths included)."""
        scan = self.scan and replace(self.scan, datasets=())
        return replace(
            self, scan=scan, tasks={n: t for n, t in self.tasks.items() if n in tasks},
            bad_videos=tuple(b for b in self.bad_videos if b.task in tasks),
            task_errors={n: e for n, e in self.task_errors.items() if n in task_errors},
            failures=tuple(f for f in self.failures if f.task in tasks),
            failures_total=sum(f.count for f in self.failures if f.task in tasks))

    def to_json(self) -> dict:
        sched, counters = self.scheduler, self.counters
        return {
            "version": STATUS_VERSION,
            "uptime_seconds": round(self.uptime_seconds, 3),
            "pid": self.pid,
            "workers": self.workers,
            "execution": self.execution,
            "memory_bytes": self.memory_bytes,
            "memory_limit_bytes": self.memory_limit_bytes,
            "tasks": {name: asdict(task) for name, task in self.tasks.items()},
            **{key: counters[key] for key in COUNTERS[:3]},
            "cache": dict(self.cache),
            **{key: counters[key] for key in COUNTERS[3:8]},
            "scheduler": {"jobs_done": sched.jobs_done, "jobs_running": sched.jobs_running,
                          "workers_active": sched.workers_active,
                          "views_ready": sched.views_ready,
                          "views_planned": sched.views_planned,
                          "evicted_unread": sched.evicted_unread,
                          "rebuilt_from_disk": sched.rebuilt_from_disk,
                          "clips_recomputed": counters["clips_recomputed"],
                          "windows_in_parts": list(sched.windows_in_parts or ())},
            "frames_from_disk": counters["frames_from_disk"],
            "frames_carried": counters["frames_carried"],
            "clips_made_ahead": counters["clips_made_ahead"],
            "queues": {"demand": self.ondemand_waiting + sched.demand_waiting,
                       "prematerialize": sched.pending_jobs},
            "bad_videos": [bad.to_json() for bad in self.bad_videos],
            "task_errors": dict(self.task_errors),
            "remote": dict(self.remote),
            "isolated_ops": dict(self.isolated_ops),
            "failures": [failure.to_json() for failure in self.failures],
            "failures_total": self.failures_total,
            "state_files_rebuilt": self.state_files_rebuilt,
            **({} if self.scan is None else {"scan": self.scan.to_json()}),
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n").encode()


def serves(record: Mapping, pid: int) -> bool:
    """Does this status.json record, as read back from a mount, say that daemon `pid` serves
    the views there (its startup scan done)? A mount answers status.json while it scans, and a
    stale one may still answer for another daemon."""
    return record.get("pid") == pid and record.get("scan", {}).get("phase") == "ready"
