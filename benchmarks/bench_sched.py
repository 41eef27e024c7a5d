#!/usr/bin/env python3
"""Scheduling on vs off (SAND Figure 18): the same trainer with the priority scheduler (demand
first, deadlines, SJF under memory pressure) and with SANDFS_SCHEDULING=fifo (jobs in plan
order, blind to readers and deadlines).

One task (benchmarks/configs/single.yaml) over the bench_e2e dataset, 10 epochs, k=5; the
trainer reads every view in order and sleeps `--gpu-ms` per batch. With `--readers N`, N
trainers read the task at once, trainer i starting at epoch i*epochs/N and wrapping around (a
resumed job next to a fresh one): readers far apart, where demand-feeding matters. Reports the
mean iteration time (wall until the last trainer ends / iterations of one trainer), reader
stalls and the ratio fifo / priority, policies interleaved over `--repeats`.

Usage: benchmarks/bench_sched.py [--videos 48] [--epochs 10] [--gpu-ms 40] [--repeats 2]
                                 [--readers 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml
from common import emit, sandfs_mount, start_bench

CONFIG = Path(__file__).parent / "configs" / "single.yaml"


def write_config(workdir: Path, dataset: Path, epochs: int) -> Path:
    config = yaml.safe_load(CONFIG.read_text())
    config["task"], config["epochs"] = "single", epochs
    config["dataset"]["video_dataset_path"] = str(dataset)
    path = workdir / "single.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def train(mountpoint: Path, epochs: int, gpu_s: float, first_epoch: int = 0) -> int:
    iterations = len(os.listdir(mountpoint / "single" / "0"))
    for step in range(epochs):
        epoch = (first_epoch + step) % epochs
        for iteration in range(iterations):
            with open(mountpoint / "single" / str(epoch) / str(iteration) / "view", "rb") as f:
                np.load(f)
            time.sleep(gpu_s)
    return epochs * iterations


def train_all(mountpoint: Path, args) -> int:
    """`args.readers` trainers at once, spread over the epochs; iterations of one of them."""
    starts = [i * args.epochs // args.readers for i in range(args.readers)]
    with ThreadPoolExecutor(args.readers) as pool:
        done = list(pool.map(lambda first: train(mountpoint, args.epochs, args.gpu_ms / 1000,
                                                 first), starts))
    return done[0]


def run(workdir: Path, config: Path, policy: str, args) -> dict:
    with sandfs_mount(workdir, [config], k_epochs=5, workers=os.cpu_count() or 2,
                      env={"SANDFS_SCHEDULING": policy}) as mount:
        started = time.monotonic()
        iterations = train_all(mount.mountpoint, args)
        wall_s = time.monotonic() - started
        status = mount.status()
    return {"bench": "sched", "policy": policy, "readers": args.readers, "iterations": iterations,
            "wall_s": round(wall_s, 2), "iteration_ms": round(1000 * wall_s / iterations, 1),
            "stall_s": status["tasks"]["single"]["stall_seconds"],
            "frames_decoded": status["frames_decoded"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=48)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--gpu-ms", type=float, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--readers", type=int, default=1,
                        help="trainers reading the task at once, spread over the epochs")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    args = parser.parse_args()
    dataset = start_bench("sched", args)
    times: dict[str, list[float]] = {"priority": [], "fifo": []}
    with tempfile.TemporaryDirectory(prefix="sandfs-bench-sched-") as tmp:
        config = write_config(Path(tmp), dataset, args.epochs)
        for repeat in range(args.repeats):
            order = ("priority", "fifo") if repeat % 2 == 0 else ("fifo", "priority")
            for policy in order:
                record = run(Path(tmp), config, policy, args)
                times[policy].append(record["iteration_ms"])
                emit(record | {"repeat": repeat})
    priority, fifo = statistics.median(times["priority"]), statistics.median(times["fifo"])
    emit({"bench": "sched_summary", "iteration_ms_priority": priority,
          "iteration_ms_fifo": fifo, "fifo_slower_by": round(fifo / priority - 1, 3)})


if __name__ == "__main__":
    main()
