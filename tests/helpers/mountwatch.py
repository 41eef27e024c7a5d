"""Watching a sandfs mount from outside its daemon (the test harness, the benchmarks): whether a
path is mounted, whether a given daemon serves it, and waiting until it does."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from sandfs.mounttable import SANDFS_FSTYPE, is_mounted, mountpoints
from sandfs.status import serves as serving

__all__ = ["SANDFS_FSTYPE", "is_mounted", "mounts_under", "served_by", "serving", "wait_served"]

def mounts_under(prefix: str | Path) -> list[str]:
    base = os.path.abspath(prefix) + os.sep
    return [m for m in mountpoints() if m.startswith(base)]


def served_by(mountpoint: Path, pid: int) -> bool:
    """True when `mountpoint` is served by daemon `pid` (not a stale mount of a dead one) and
    its tasks are planned (status.json answers during the startup scan already)."""
    try:
        status = json.loads((mountpoint / ".sand" / "status.json").read_bytes())
    except (OSError, ValueError):
        return False
    return serving(status, pid)


def wait_served(mountpoint: Path, process: subprocess.Popen, log_path: Path,
                timeout_s: float) -> None:
    """Until the daemon `process` serves `mountpoint`; RuntimeError with its log's tail when it
    exits first or takes longer than `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sandfs exited with {process.returncode} before mounting:\n"
                               f"{log_path.read_text(errors='replace')[-3000:]}")
        if is_mounted(mountpoint) and served_by(mountpoint, process.pid):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sandfs did not serve {mountpoint} within {timeout_s:.0f}s:\n"
                       f"{log_path.read_text(errors='replace')[-3000:]}")
