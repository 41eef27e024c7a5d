"""Whether a daemon process still runs, and waiting until it has exited. A daemon whose parent
is gone (a detached `sandfs mount`, a killed Ray actor's child) is adopted by whoever reaps
orphans here, perhaps late: until then it is a zombie, which has exited all the same."""

from __future__ import annotations

import time


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_for_exit(pid: int, deadline: float) -> bool:
    """Until `pid` has exited (True) or time.monotonic() passes `deadline` (False)."""
    while running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
