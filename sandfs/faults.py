"""Fault points for crash and failure tests: SANDFS_FAULT=<point>:<nth>[:<action>].

At the nth time (1-based) the named point is reached, the action runs: kill9 (SIGKILL this
process), raise (RuntimeError), sleep (10 s), enospc (OSError ENOSPC). Unset: a no-op.
Where each point sits and what crash tests assert: docs/testplan.md#fault-points.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

POINTS = {
    "after_decode", "cache_write_mid", "after_write_before_rename", "after_rename_before_index",
    "batch_assemble", "serving_read", "evict_mid", "scan_video",
    "plan_task",
}
_lock = threading.Lock()
_hits: dict[str, int] = {}


def _parse(spec: str) -> tuple[str, int, str] | None:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] not in POINTS or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else "raise"


_SPEC = _parse(os.environ.get("SANDFS_FAULT", ""))


def fault_point(name: str) -> None:
    if _SPEC is None or _SPEC[0] != name:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] != _SPEC[1]:
            return
    action = _SPEC[2]
    if action == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "sleep":
        time.sleep(10)
    elif action == "enospc":
        raise OSError(errno.ENOSPC, "injected ENOSPC", name)
    else:
        raise RuntimeError(f"injected fault at {name}")
