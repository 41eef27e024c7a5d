"""A daemon killed outright (SIGKILL) while a custom step hangs in its worker process leaves no
worker behind: the worker sees it was orphaned and exits (the daemon can no longer kill it,
and the closed pipe would only reach it after the op)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

DAEMON = """
import threading, numpy as np, custom_ops
from sandfs import ops as oplib
from sandfs.ops import isolated
custom_ops.register()
frame = np.zeros((8, 8, 3), np.uint8)
op = oplib.get_op("test_misbehave")
threading.Thread(target=isolated.apply_isolated, args=(op, {"how": "hang"}, {}, [frame]),
                 daemon=True).start()
threading.Event().wait()
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_running_workers(parent: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == parent and b"worker_main" in cmdline:
            found.append(int(entry))
    return found


def wait_for(predicate, seconds: float):
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    return predicate()


def test_a_worker_hung_in_a_step_exits_when_its_daemon_is_killed():
    path = os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(TESTS)])
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON],
                              env={**os.environ, "PYTHONPATH": path})
    try:
        workers = wait_for(lambda: children_running_workers(daemon.pid), 60)
        assert len(workers) == 1
        time.sleep(0.5)  # the step has the frame and sleeps (its timeout_s is 1.5 s)
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
    exited = wait_for(lambda: not alive(workers[0]), 30)
    if not exited:
        os.kill(workers[0], signal.SIGKILL)  # leave nothing behind, even failing
    assert exited, "the orphaned worker still runs"
