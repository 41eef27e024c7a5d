"""The machine counters the benchmarks report beside their figures, read from the kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from common import descendants_peak_rss_mb, machine_written_bytes, peak_rss_mb


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding `path` (the longest mount point above it)."""
    best, kind = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            _, mountpoint, fstype = line.split()[:3]
            inside = path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")
            if inside and len(mountpoint) > len(best):
                best, kind = mountpoint, fstype
    return kind


def test_written_bytes_count_a_synced_file(tmp_path):
    if filesystem_type(str(tmp_path)) in ("tmpfs", "ramfs"):
        pytest.skip("the temp dir is not on a disk the kernel writes back to")
    before = machine_written_bytes()
    with open(tmp_path / "four-mib", "wb") as f:
        f.write(os.urandom(4 << 20))
        f.flush()
        os.fsync(f.fileno())
    assert machine_written_bytes() - before >= 4 << 20


def test_a_process_s_descendants_peak_rss_is_theirs_not_its_own():
    """bench_e2e's `workers_peak_rss_mb`: a daemon's job workers, its children."""
    alone = descendants_peak_rss_mb(os.getpid())
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; b = b'x' * (64 << 20); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        give_up = time.monotonic() + 10
        while (peak_rss_mb(child.pid) or 0) < 64 and time.monotonic() < give_up:
            time.sleep(0.05)
        assert descendants_peak_rss_mb(os.getpid()) - alone >= 64
    finally:
        child.communicate(b"")
