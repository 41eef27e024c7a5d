#!/usr/bin/env python3
"""Memory under pressure: does `memory_bytes` stay within `memory_limit_bytes`, and how far
above `memory_limit` does the daemon's RSS go?

The two tasks of bench_cache.py (SlowFast-like and MAE-like views of 9.6 MB each) read in
lockstep with a `--memory` limit of a few views, decode-ahead on. A thread samples
`.sand/status.json` and the daemon's RSS every `--interval` seconds. Reported per limit: the
highest `memory_bytes / memory_limit_bytes` seen, the daemon's peak RSS (VmHWM), its RSS right
after mount (the interpreter and libraries), and the overhead: peak RSS minus `memory_limit`.

Usage: benchmarks/bench_memory.py [--memory 48M 96M] [--epochs 4] [--decode-ahead 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_cache import read_all, write_configs
from common import PeakMemory, _rss_bytes, emit, peak_rss_mb, sandfs_mount, start_bench

from sandfs.config.settings import parse_size


class StatusSampler(PeakMemory):
    """The highest memory_bytes / memory_limit_bytes in status.json, and the daemon's peak RSS
    (its process tree's), sampled in a thread while the `with` block runs."""

    def __init__(self, mountpoint: Path, pid: int, interval_s: float) -> None:
        super().__init__(lambda: [pid], interval_s)
        self.status_path = mountpoint / ".sand" / "status.json"
        self.samples, self.max_ratio, self.max_memory = 0, 0.0, 0

    def sample(self) -> None:
        super().sample()
        status = json.loads(self.status_path.read_bytes())
        used, limit = status["memory_bytes"], status["memory_limit_bytes"]
        self.samples += 1
        self.max_memory = max(self.max_memory, used)
        self.max_ratio = max(self.max_ratio, used / limit)


def run(workdir: Path, dataset: Path, memory: str, args) -> dict:
    configs = write_configs(workdir, dataset, args.epochs, memory)
    with sandfs_mount(workdir, configs, k_epochs=args.k_epochs, workers=args.workers,
                      extra_args=["--decode-ahead", str(args.decode_ahead)]) as mount:
        start_rss = _rss_bytes(mount.pid)
        with StatusSampler(mount.mountpoint, mount.pid, args.interval) as sampler:
            iterations = read_all(mount.mountpoint, args.epochs)
        peak_mib = peak_rss_mb(mount.pid) or 0.0
        status = mount.status()
    limit = parse_size(memory)
    mib = 2**20
    return {
        "bench": "memory", "memory_limit": memory, "decode_ahead": args.decode_ahead,
        "iterations": iterations, "samples": sampler.samples,
        "memory_limit_bytes": status["memory_limit_bytes"],
        "max_memory_bytes": sampler.max_memory,
        "max_memory_ratio": round(sampler.max_ratio, 3),
        "start_rss_mib": round(start_rss / mib, 1),
        "peak_rss_mib": peak_mib,
        "overhead_mib": round(peak_mib - limit / mib, 1),
        "growth_over_limit_mib": round(peak_mib - start_rss / mib - limit / mib, 1),
        "frames_carried": status["frames_carried"],
        "evicted_unread": status["scheduler"]["evicted_unread"],
        "stall_s": round(sum(t["stall_seconds"] for t in status["tasks"].values()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", nargs="+", default=["48M", "96M"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--k-epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--decode-ahead", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    args = parser.parse_args()
    dataset = start_bench("memory", args)
    for memory in args.memory:
        with tempfile.TemporaryDirectory(prefix="sandfs-bench-memory-") as tmp:
            emit(run(Path(tmp), dataset, memory, args))


if __name__ == "__main__":
    main()
