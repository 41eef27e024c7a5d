""".sand/metrics: the mount's status in the Prometheus text exposition format (version 0.0.4).

Built from the same typed record as status.json, so the two never disagree: every counter here
is a status.json figure under a `sandfs_*` name (counters end in `_total`, count since the
daemon started, or since the cache store was created for the cache's own counters).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sandfs.status import MountStatus

# status.counters keys -> help text; each becomes sandfs_<key>_total
_WORK_COUNTERS = {
    "frames_decoded": "Frames decoded by the merged plan.",
    "frames_decoded_independent": "Frames the tasks would have decoded, each loading alone.",
    "views_materialized": "Views (batches) built.",
    "views_recomputed": "Views built again after their bytes were dropped.",
    "aug_ops": "Augmentation operations run.",
    "aug_ops_independent": "Augmentation operations the tasks would have run alone.",
    "crop_ops": "Crop operations run.",
    "crop_ops_independent": "Crop operations the tasks would have run alone.",
    "clips_recomputed": "Clips built again after their frames were evicted.",
    "frames_from_disk": "Frames read back from the cache store instead of decoded.",
    "frames_carried": "Frames kept in memory from one decode window to the next.",
}
_CACHE_GAUGES = {"bytes_used": "Bytes the cache store holds on disk.",
                 "budget_bytes": "The cache store's storage budget in bytes.",
                 "objects": "Objects in the cache store."}
_CACHE_COUNTERS = {"hits": "Cache store reads that found their object.",
                   "misses": "Cache store reads that did not.",
                   "evictions": "Objects evicted from the cache store.",
                   "recomputed": "Cache objects built again after eviction or corruption."}
_CACHE_FAILURES = ("corrupt_detected", "enospc", "write_failures", "no_room")
_REMOTE_COUNTERS = {"bytes_fetched": "Video bytes received from the remote store.",
                    "requests": "Requests made to the remote store.",
                    "retries": "Remote requests retried.",
                    "files_fetched": "Remote files copied in.",
                    "files_reused": "Remote files reused from an earlier fetch.",
                    "files_changed": "Remote files found changed on the store."}
# (metric name, TaskStatus field, type, help): one sample per task
_TASK_FIGURES = (
    ("views_served", "views_served", "counter", "View reads answered, per task."),
    ("stall_seconds", "stall_seconds", "counter", "Seconds readers waited for a view."),
    ("ready_ahead", "ready_ahead", "gauge", "Views ready beyond the task's position."),
    ("task_epochs", "epochs", "gauge", "Epochs the task's plan has."),
    ("task_iterations_per_epoch", "iterations_per_epoch", "gauge",
     "Iterations in each of the task's epochs."),
    ("task_videos", "videos", "gauge", "Videos the task reads."),
)


@dataclass(frozen=True, slots=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # with `_total` for counters, as exposed
    kind: str  # "counter" or "gauge"
    help: str
    samples: tuple[Sample, ...]


def metric(name: str, kind: str, help_text: str, value: float | None = None,
           samples: Iterable[Sample] = ()) -> Metric:
    """One metric; `value` gives it a single unlabelled sample."""
    full = f"sandfs_{name}_total" if kind == "counter" else f"sandfs_{name}"
    found = (Sample((), value),) if value is not None else tuple(samples)
    return Metric(full, kind, help_text, found)


def per_task(status: MountStatus, field: str) -> list[Sample]:
    return [Sample((("task", name),), getattr(task, field))
            for name, task in sorted(status.tasks.items())]


def collect(status: MountStatus) -> list[Metric]:
    """Every metric of one status record, in a stable order."""
    sched, cache, remote = status.scheduler, status.cache, status.remote
    out = [
        metric("uptime_seconds", "gauge", "Seconds since the daemon started.",
               status.uptime_seconds),
        metric("workers", "gauge", "Worker threads.", status.workers),
        metric("memory_bytes", "gauge", "Bytes of views and clips held in memory.",
               status.ondemand_memory_bytes + sched.memory_bytes),
        metric("memory_limit_bytes", "gauge", "The memory budget for views and clips.",
               sched.memory_limit_bytes),
    ]
    out += [metric(key, "counter", text, status.counters.get(key, 0))
            for key, text in _WORK_COUNTERS.items()]
    out += [metric(name, kind, text, samples=per_task(status, field))
            for name, field, kind, text in _TASK_FIGURES]
    out += [
        metric("task_position", "gauge", "The task's reading position.",
               samples=[Sample((("task", name), ("what", what)), getattr(task, what))
                        for name, task in sorted(status.tasks.items())
                        for what in ("epoch", "iteration")]),
        metric("jobs_done", "counter", "Prematerialization jobs finished.", sched.jobs_done),
        metric("jobs_running", "gauge", "Prematerialization jobs running.", sched.jobs_running),
        metric("workers_active", "gauge", "Workers busy now.", sched.workers_active),
        metric("views_ready", "gauge", "Views built and waiting to be read.", sched.views_ready),
        metric("views_planned", "gauge", "Views planned in the current window.",
               sched.views_planned),
        metric("evicted_unread", "counter", "Views dropped before anyone read them.",
               sched.evicted_unread),
        metric("rebuilt_from_disk", "counter", "Views rebuilt from frames on disk.",
               sched.rebuilt_from_disk),
        metric("queue_demand", "gauge", "Readers blocked waiting for a view.",
               status.ondemand_waiting + sched.demand_waiting),
        metric("queue_prematerialize", "gauge", "Video jobs with clips not made yet.",
               sched.pending_jobs),
    ]
    out += [metric(f"cache_{key}", "gauge", text, cache.get(key, 0))
            for key, text in _CACHE_GAUGES.items()]
    out += [metric(f"cache_{key}", "counter", text, cache.get(key, 0))
            for key, text in _CACHE_COUNTERS.items()]
    out += [metric(f"remote_{key}", "counter", text, remote.get(key, 0))
            for key, text in _REMOTE_COUNTERS.items()]
    failures = [Sample((("kind", f"cache_{key}"),), cache.get(key, 0)) for key in _CACHE_FAILURES]
    failures.append(Sample((("kind", "remote_errors"),), remote.get("errors", 0)))
    out += [
        metric("failures", "counter", "Failures the daemon survived, by kind.",
               samples=failures),
        metric("bad_videos", "gauge", "Videos left out (unreadable or refused).",
               len(status.bad_videos)),
        metric("task_errors", "gauge", "Task registrations the daemon refused.",
               len(status.task_errors)),
    ]
    return out


def escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def format_metric(m: Metric) -> list[str]:
    lines = [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}"]
    for sample in m.samples:
        labels = ",".join(f'{key}="{escape(val)}"' for key, val in sample.labels)
        lines.append(f"{m.name}{{{labels}}} {format_value(sample.value)}" if labels
                     else f"{m.name} {format_value(sample.value)}")
    return lines


def render_metrics(status: MountStatus) -> bytes:
    """The whole exposition: HELP and TYPE for each metric, one line per sample."""
    lines = [line for m in collect(status) for line in format_metric(m)]
    return ("\n".join(lines) + "\n").encode()
