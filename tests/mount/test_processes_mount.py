"""A real mount with `--execution processes`: its views are the in-process reference's, and a
daemon killed with SIGKILL mid-run leaves neither worker processes nor shared memory behind
(memfds: nothing named in /dev/shm), so a remount on the same cache dir starts clean."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from sandfs.execution.shm import NAME
from tests.helpers.harness import (
    forgiving_teardown,
    mount_sandfs,
    start_daemon,
    wait_mounted,
)
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view

PROCESSES = ["--execution", "processes"]


def job_workers(daemon_pid: int) -> set[int]:
    """The daemon's job worker processes (its children running sandfs.execution.worker)."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == daemon_pid and b"sandfs.execution.worker" in cmdline:
            found.add(int(entry))
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()
            and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]}


def named_segments() -> set[str]:
    """What sandfs might have left in /dev/shm (others' segments come and go beside it)."""
    return {name for name in os.listdir("/dev/shm") if "sandfs" in name}


def memfds(pid: int) -> int:
    """The shared buffers a process holds open (`sandfs.execution.shm`: memfd:sandfs-shm)."""
    fds, found = Path(f"/proc/{pid}/fd"), 0
    for fd in os.listdir(fds):
        with contextlib.suppress(FileNotFoundError):  # closed since the listing
            found += os.readlink(fds / fd).startswith(f"/memfd:{NAME}")
    return found


def test_a_daemon_killed_outright_leaves_no_workers_nor_shared_memory(tmp_path, config_path):
    plan = build_plan(config_path)
    shm_before = named_segments()
    mountpoint, cache_dir, log = tmp_path / "mnt", tmp_path / "mnt-cache", tmp_path / "kill.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [config_path], cache_dir, log, PROCESSES)
    try:
        wait_mounted(mountpoint, process, log)
        first = (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        workers = job_workers(process.pid)
        assert workers, "no job worker process: the test shows nothing"
        assert memfds(process.pid) > 0  # batches in shared memory, named nowhere
        os.kill(process.pid, signal.SIGKILL)  # the daemon alone, mid-run
        process.wait(timeout=10)
    finally:
        forgiving_teardown(mountpoint, process)
    give_up = time.monotonic() + 10
    while alive(workers) and time.monotonic() < give_up:
        time.sleep(0.1)
    assert not alive(workers), "a job worker outlived its daemon"
    assert named_segments() - shm_before == set()
    assert first == reference_view(plan, 0, 0)
    with mount_sandfs(tmp_path, [config_path], extra_args=PROCESSES) as m:  # same cache dir
        for epoch in range(plan.epochs):
            for iteration in range(plan.iterations_per_epoch):
                assert m.path("t0", str(epoch), str(iteration), "view").read_bytes() == \
                    reference_view(plan, epoch, iteration), (epoch, iteration)
        assert job_workers(m.process.pid)
    assert named_segments() - shm_before == set()
