#!/usr/bin/env python3
"""Pruning vs caching only final clips under a storage budget (SAND Figure 17).

Two tasks (benchmarks/configs/slowfast.yaml + mae.yaml) over the Kinetics-like synthetic
dataset of bench_e2e, 10 epochs, k=5, with little memory (`memory_limit`) so batches beyond the
memory horizon must come from the disk cache or be recomputed. For a large and a small
`--budget`, sandfs runs once with Algorithm 1 (the default) and once with SANDFS_PRUNE=leaves
(keep final clips only, soonest needed first). Reported per run: the daemon's CPU seconds per
iteration (preprocessing time), frames decoded, clips recomputed, reader stalls.

Usage: benchmarks/bench_cache.py [--budgets 400M 100M] [--memory 48M] [--epochs 10]
                                 [--decode-ahead 0]
Decoding ahead is off by default here: carried frames share the budget, and this compares
pruning alone (the figures in the READMEs were taken so).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from common import emit, sandfs_mount, start_bench, tree_cpu_seconds

CONFIG_DIR = Path(__file__).parent / "configs"
TASKS = (("slowfast", "slowfast.yaml"), ("mae", "mae.yaml"))


def write_configs(out_dir: Path, dataset: Path, epochs: int, memory: str) -> list[Path]:
    paths = []
    for task, template in TASKS:
        config = yaml.safe_load((CONFIG_DIR / template).read_text())
        config["task"], config["epochs"] = task, epochs
        config["dataset"]["video_dataset_path"] = str(dataset)
        config["engine"] = {"memory_limit": memory}
        path = out_dir / f"{task}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        paths.append(path)
    return paths


def read_all(mountpoint: Path, epochs: int) -> int:
    """Both tasks in lockstep, epoch by epoch, as two trainers started together would."""
    iterations = {task: len(os.listdir(mountpoint / task / "0")) for task, _ in TASKS}
    count = 0
    for epoch in range(epochs):
        for iteration in range(max(iterations.values())):
            for task, _ in TASKS:
                if iteration < iterations[task]:
                    with open(mountpoint / task / str(epoch) / str(iteration) / "view", "rb") as f:
                        np.load(f)
                    count += 1
    return count


def run(workdir: Path, configs: list[Path], budget: str, mode: str, args) -> dict:
    env = {"SANDFS_PRUNE": "leaves" if mode == "leaves" else "algorithm1"}
    with sandfs_mount(workdir, configs, k_epochs=5, workers=os.cpu_count() or 2,
                      extra_args=["--budget", budget, "--decode-ahead", str(args.decode_ahead)],
                      env=env) as mount:
        cpu_before = tree_cpu_seconds(mount.pid)
        started = time.monotonic()
        iterations = read_all(mount.mountpoint, args.epochs)
        wall_s = time.monotonic() - started
        cpu_s = tree_cpu_seconds(mount.pid) - cpu_before
        status = mount.status()
    cache = status["cache"]
    return {
        "bench": "cache", "budget": budget, "mode": mode, "decode_ahead": args.decode_ahead,
        "iterations": iterations,
        "wall_s": round(wall_s, 2), "daemon_cpu_s": round(cpu_s, 2),
        "preprocess_ms_per_iteration": round(1000 * cpu_s / iterations, 1),
        "frames_decoded": status["frames_decoded"],
        "frames_from_disk": status.get("frames_from_disk", 0),
        "clips_recomputed": status["scheduler"]["clips_recomputed"],
        "rebuilt_from_disk": status["scheduler"]["rebuilt_from_disk"],
        "stall_s": round(sum(t["stall_seconds"] for t in status["tasks"].values()), 2),
        "cache_bytes_used": cache["bytes_used"], "cache_objects_by_kind":
        cache.get("objects_by_kind"), "evictions": cache["evictions"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", nargs="+", default=["400M", "100M"])
    parser.add_argument("--memory", default="48M", help="the daemon's memory_limit")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--decode-ahead", type=int, default=0,
                        help="sandfs --decode-ahead (default 0: pruning alone is compared)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    args = parser.parse_args()
    dataset = start_bench("cache", args)
    with tempfile.TemporaryDirectory(prefix="sandfs-bench-cache-") as tmp:
        workdir = Path(tmp)
        configs = write_configs(workdir, dataset, args.epochs, args.memory)
        for budget in args.budgets:
            results = {mode: run(workdir, configs, budget, mode, args)
                       for mode in ("algorithm1", "leaves")}
            for record in results.values():
                emit(record)
            pruned = results["algorithm1"]["preprocess_ms_per_iteration"]
            leaves = results["leaves"]["preprocess_ms_per_iteration"]
            emit({"bench": "cache_summary", "budget": budget,
                  "pruning_saves": round(1 - pruned / leaves, 3) if leaves else None})


if __name__ == "__main__":
    main()
