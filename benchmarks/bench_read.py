#!/usr/bin/env python3
"""Serving ready views: read throughput through the mount and the daemon's CPU per GB served.

Four tasks with identical pipelines (a search's trials: their views are the same objects) over
a small dataset whose views are 4 clips x 32 x 224x224x3 uint8 (19.3 MB). After a warm-up pass
has every view of epoch 0 ready in memory, two scenarios, each repeated:

- `one_reader`: one process reads each view of task t0, dropping the file's page cache first
  (posix_fadvise DONTNEED), so every byte comes from the daemon.
- `one_reader_direct`: the same, each view opened with O_DIRECT, as `sandfs.reading` opens a
  view that only one task reads: the daemon's reply goes straight into the reader's buffer,
  with no page-cache copy (these views have four readers; the scenario opens them so anyway).
- `four_trials`: four processes, reader k reading task t{k}'s views in the same order, page
  caches dropped before the round: what a search's trials reading in step get.

Reported per scenario: MB/s (the median over repeats), and the daemon's CPU seconds per GB
served (utime + stime from /proc/PID/stat, over all repeats); with --gil, the GIL ms per GB
served (py-spy, `gil.py`: as sampled, on a CPU, and the trio loop's part).

Usage: benchmarks/bench_read.py [--repeats 5] [--videos 16] [--data-dir DIR] [--gil]
       [--gil-raw DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from common import emit, machine_busy_cores, machine_info, sandfs_mount, tree_cpu_seconds
from gil import DEFAULT_RATE_HZ, GilSampler

from sandfs.reading import open_view

TASKS = ("t0", "t1", "t2", "t3")
CLIPS, FRAMES, SIDE = 4, 32, 224


def ensure_dataset(data_dir: Path, videos: int) -> Path:
    """4 classes of 240x240 videos, 40-48 frames: enough for one 32-frame clip each."""
    from sandfs.media.synth import make_dataset

    root = data_dir / f"read-{videos}x240"
    if not (root / "DONE").exists():
        make_dataset(root, classes=4, videos_per_class=videos // 4, num_frames=(40, 48),
                     size=(240, 240))
        (root / "DONE").write_text("")
    return root


def write_configs(out_dir: Path, dataset: Path) -> list[Path]:
    paths = []
    for task in TASKS:
        config = {
            "task": task, "seed": 0, "epochs": 1,
            "dataset": {"tag": "train", "input_source": "file",
                        "video_dataset_path": str(dataset), "extensions": [".mp4"],
                        "sampling": {"videos_per_batch": CLIPS, "frames_per_video": FRAMES},
                        "augmentation": [{"name": "crop", "branch_type": "single",
                                          "inputs": ["frame"], "outputs": ["cropped"],
                                          "config": [{"random_crop": {"size": [SIDE, SIDE]}}]}]},
            "engine": {"k_epochs": 1, "decode_ahead": 0},
        }
        path = out_dir / f"{task}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        paths.append(path)
    return paths


def view_paths(mountpoint: Path, task: str) -> list[Path]:
    count = len(os.listdir(mountpoint / task / "0"))
    return [mountpoint / task / "0" / str(i) / "view" for i in range(count)]


def drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_whole(path: Path, buffer: bytearray, direct: bool = False) -> int:
    """Read the file into `buffer` (preallocated, as a trainer's loader would) in large reads;
    `direct`: opened with O_DIRECT."""
    view, done = memoryview(buffer), 0
    with open(open_view(path, direct), "rb", buffering=0) as f:
        while n := f.readinto(view[done:]):
            done += n
    return done


def reader(paths: list[Path], size: int, start, results) -> None:
    buffer = bytearray(size)
    start.wait()
    started = time.perf_counter()
    total = sum(read_whole(p, buffer) for p in paths)
    results.put((total, time.perf_counter() - started))


def one_reader(paths: list[Path], size: int, direct: bool = False) -> tuple[int, float]:
    buffer, total, elapsed = bytearray(size), 0, 0.0
    for path in paths:
        drop_page_cache(path)
        started = time.perf_counter()
        total += read_whole(path, buffer, direct)
        elapsed += time.perf_counter() - started
    return total, elapsed


def four_trials(mountpoint: Path, size: int) -> tuple[int, float]:
    per_task = [view_paths(mountpoint, task) for task in TASKS]
    for paths in per_task:
        for path in paths:
            drop_page_cache(path)
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(len(TASKS) + 1), ctx.Queue()
    procs = [ctx.Process(target=reader, args=(paths, size, start, results)) for paths in per_task]
    for proc in procs:
        proc.start()
    start.wait()
    started = time.perf_counter()
    total = sum(results.get()[0] for _ in procs)
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.join()
    return total, elapsed


def measure(name: str, repeats: int, pid: int, run, gil_rate: int = 0,
            gil_raw: Path | None = None) -> dict:
    """`gil_rate`: also sample the daemon's GIL at this rate (py-spy), 0: not; `gil_raw`: keep
    its samples (collapsed stacks) in this directory."""
    rates, served, cpu = [], 0, 0.0
    raw = gil_raw / f"gil-read-{name}-{pid}.txt" if gil_raw is not None else None
    with GilSampler(pid, gil_rate, keep_raw=raw) if gil_rate else \
            contextlib.nullcontext() as sampler:
        for _ in range(repeats):
            cpu_before = tree_cpu_seconds(pid)
            total, elapsed = run()
            cpu += tree_cpu_seconds(pid) - cpu_before
            served += total
            rates.append(total / elapsed / 1e6)
    record = {"scenario": name, "mb_per_s_median": round(statistics.median(rates)),
              "mb_per_s": [round(r) for r in rates],
              "daemon_cpu_s_per_gb": round(cpu / (served / 1e9), 3)}
    if sampler is not None:
        record |= sampler.profile.per_gb(served)
    emit(record)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gil", action="store_true",
                        help="also the daemon's GIL ms per GB (py-spy --gil, benchmarks/gil.py)")
    parser.add_argument("--gil-raw", type=Path,
                        help="with --gil: keep py-spy's samples per scenario in this directory")
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--data-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "sandfs-bench-data")
    args = parser.parse_args()
    dataset = ensure_dataset(args.data_dir, args.videos)
    paths = {"data_dir": str(args.data_dir), "gil_raw": str(args.gil_raw or "")}
    emit({"bench": "read", "params": vars(args) | paths,
          "machine": machine_info(), "busy_cores_before": machine_busy_cores()})
    with tempfile.TemporaryDirectory(prefix="sandfs-bench-read-") as tmp:
        workdir = Path(tmp)
        configs = write_configs(workdir, dataset)
        with sandfs_mount(workdir, configs, k_epochs=1, workers=2) as mount:
            paths = view_paths(mount.mountpoint, TASKS[0])
            size = os.stat(paths[0]).st_size
            for task in TASKS:  # warm-up: every view ready in memory, every task has read it
                for path in view_paths(mount.mountpoint, task):
                    read_whole(path, bytearray(size))
            emit({"view_bytes": size, "views_per_task": len(paths)})
            rate = DEFAULT_RATE_HZ if args.gil else 0
            if args.gil_raw is not None:
                args.gil_raw.mkdir(parents=True, exist_ok=True)
            scenarios = {"one_reader": lambda: one_reader(paths, size),
                         "one_reader_direct": lambda: one_reader(paths, size, direct=True),
                         "four_trials": lambda: four_trials(mount.mountpoint, size)}
            for name, run in scenarios.items():
                measure(name, args.repeats, mount.pid, run, rate, args.gil_raw)
    emit({"busy_cores_after": machine_busy_cores()})


if __name__ == "__main__":
    main()
