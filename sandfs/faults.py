"""Fault points for crash and failure tests: SANDFS_FAULT=<point>:<nth>[:<action>[:<task>]],
several separated by commas.

At the nth time (1-based; `*`: every time) the named point is reached — counting only where
it works for `task`, when one is given — the action runs: kill9 (SIGKILL this process), raise
(RuntimeError), memory (MemoryError), sleep (10 s), enospc (OSError ENOSPC). Unset: a no-op.
Where each point sits and what the tests assert: docs/testplan.md#fault-points.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

# the stages of one task's work, each a point (`fault_point(name, tasks)`), then the cache's
STAGES = ("planning", "admission", "job_start", "decode", "augment", "assembly", "serving_read")
POINTS = {
    *STAGES, "scheduler", "after_decode", "cache_write_mid", "after_write_before_rename",
    "after_rename_before_index", "batch_assemble", "evict_mid", "background_scan", "plan_task",
}
ACTIONS = ("kill9", "raise", "memory", "sleep", "enospc")
EVERY = 0  # nth for `*`


@dataclass(frozen=True, slots=True)
class Fault:
    point: str
    nth: int  # EVERY: each time
    action: str = "raise"
    task: str | None = None  # None: whichever task's work reaches it


_lock = threading.Lock()
_hits: dict[Fault, int] = {}


def _parse(spec: str) -> tuple[Fault, ...] | None:
    faults = []
    for one in filter(None, spec.split(",")):
        parts = one.split(":")
        if not 2 <= len(parts) <= 4 or parts[0] not in POINTS:
            return None
        if not (parts[1].isdigit() or parts[1] == "*"):
            return None
        action = parts[2] if len(parts) > 2 else "raise"
        if action not in ACTIONS:
            return None
        nth = EVERY if parts[1] == "*" else int(parts[1])
        faults.append(Fault(parts[0], nth, action, parts[3] if len(parts) > 3 else None))
    return tuple(faults) or None


_SPEC = _parse(os.environ.get("SANDFS_FAULT", ""))


def fault_point(name: str, tasks: str | Collection[str] = ()) -> None:
    """`tasks`: whose work reaches the point here (a fault for a task fires only there)."""
    if _SPEC is None:
        return
    for fault in _SPEC:
        if fault.point == name and _due(fault, tasks):
            _act(fault)


def _due(fault: Fault, tasks: str | Collection[str]) -> bool:
    names = (tasks,) if isinstance(tasks, str) else tasks
    if fault.task is not None and fault.task not in names:
        return False
    with _lock:
        _hits[fault] = _hits.get(fault, 0) + 1
        return fault.nth in (EVERY, _hits[fault])


def _act(fault: Fault) -> None:
    where = fault.point if fault.task is None else f"{fault.point} for task {fault.task}"
    if fault.action == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "sleep":
        time.sleep(10)
    elif fault.action == "enospc":
        raise OSError(errno.ENOSPC, "injected ENOSPC", where)
    elif fault.action == "memory":
        raise MemoryError(f"injected fault at {where}")
    else:
        raise RuntimeError(f"injected fault at {where}")
