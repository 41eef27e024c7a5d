#!/usr/bin/env python3
"""Another user's unread tasks against root's reads (docs/deploy.md#limits).

A root daemon serves root's task `healthy` (6 small videos, 2 per batch, 8 frames, resize +
crop, k=2). The unprivileged user `nobody` registers N tasks on root's world-readable dataset
(seeds 1000+i, 1,000,000 epochs, the same pipeline) and never reads them. Then root reads 30
views of `healthy` one after another, from an epoch no one has read, so the reads go through
window planning and decoding. Reported per N: the registrations' wall time, and root's read
latencies (p50, p95, max, total).

`--read-once`: `nobody` reads one view of each of its tasks (task i at epoch 5000 + 100 i),
then root reads 30 views at once ("during"), and 30 more `--wait` seconds after nobody's last
read ("after"): with `--idle-after S` (the `idle_after_s` limit, S < wait) nobody's tasks are
idle by then and make nothing ahead.

Run as root (it acts as `nobody`); `--limit tasks_per_uid=...` is raised to N so the bound
itself does not refuse the tasks.

Usage: benchmarks/bench_unread.py [--tasks 0 200] [--views 30] [--work-dir DIR]
           [--read-once [--wait 20] [--idle-after 10]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

import yaml
from common import emit, machine_info, sandfs_mount

from sandfs.media.synth import make_dataset

NOBODY = 65534
PIPELINE = [{"name": "r", "branch_type": "single", "inputs": ["frame"], "outputs": ["o"],
             "config": [{"resize": {"shape": [72, 96]}}, {"random_crop": {"size": [64, 64]}}]}]


def task(name: str, data: Path, seed: int, epochs: int) -> dict:
    return {"task": name, "seed": seed, "epochs": epochs,
            "dataset": {"tag": "bench", "video_dataset_path": str(data), "labels": "dirname",
                        "sampling": {"videos_per_batch": 2, "frames_per_video": 8,
                                     "frame_stride": 2},
                        "augmentation": PIPELINE}}


def as_nobody(action, *args) -> None:
    """`action(*args)` as `nobody`, in a forked child."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            action(*args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError(f"{action.__name__} as nobody failed")


def register(tasks_dir: Path, configs: list[dict]) -> None:
    """Write each config to .sand/tasks."""
    for config in configs:
        with open(tasks_dir / f"{config['task']}.yaml", "w") as f:
            f.write(yaml.safe_dump(config))


def read_each_once(mountpoint: Path, n: int) -> None:
    for i in range(n):
        with open(mountpoint / f"u{i}" / str(5000 + 100 * i) / "0" / "view", "rb") as f:
            f.read()


def read_views(mountpoint: Path, first_epoch: int, count: int) -> list[float]:
    seconds = []
    for i in range(count):
        started = time.perf_counter()
        with open(mountpoint / "healthy" / str(first_epoch + i) / "0" / "view", "rb") as f:
            f.read()
        seconds.append(time.perf_counter() - started)
    return seconds


def run(n: int, args, data: Path, work: Path) -> dict:
    config = task("healthy", data, 0, 1000)
    config["engine"] = {"k_epochs": 2}
    path = work / "healthy.yaml"
    path.write_text(yaml.safe_dump(config))
    flags = ["--limit", f"tasks_per_uid={max(n, 1)}", "--limit", f"tasks_total={n + 8}"]
    if args.idle_after:
        flags += ["--limit", f"idle_after_s={args.idle_after}"]
    with sandfs_mount(work / f"n{n}", [path], k_epochs=2, workers=2, extra_args=flags) as m:
        read_views(m.mountpoint, 0, 2)  # warm: the first window
        started = time.perf_counter()
        as_nobody(register, m.mountpoint / ".sand" / "tasks",
                  [task(f"u{i}", data, 1000 + i, 1_000_000) for i in range(n)])
        registered_s = time.perf_counter() - started
        if not args.read_once:
            return {"bench": "unread", "user_tasks": n, "register_s": round(registered_s, 2),
                    **figures(read_views(m.mountpoint, 100, args.views)), **machine_info()}
        as_nobody(read_each_once, m.mountpoint, n)
        read_at = time.perf_counter()
        during = figures(read_views(m.mountpoint, 100, args.views))
        time.sleep(max(0.0, read_at + args.wait - time.perf_counter()))
        after = figures(read_views(m.mountpoint, 200, args.views))
    return {"bench": "unread-read-once", "user_tasks": n, "idle_after_s": args.idle_after,
            "wait_s": args.wait, **{f"during_{k}": v for k, v in during.items()},
            **{f"after_{k}": v for k, v in after.items()}, **machine_info()}


def figures(seconds: list[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    return {"views": len(ms), "total_s": round(sum(seconds), 2),
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1), "max_ms": round(ms[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[0, 200])
    parser.add_argument("--views", type=int, default=30)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sandfs-bench-unread"))
    parser.add_argument("--read-once", action="store_true",
                        help="nobody reads one view of each task, then leaves them")
    parser.add_argument("--wait", type=float, default=20.0,
                        help="with --read-once: seconds after it before root's second reads")
    parser.add_argument("--idle-after", type=int, default=0,
                        help="the idle_after_s limit (0: the daemon's default)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("run as root: it registers tasks as nobody")
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    args.work_dir.chmod(0o755)
    data = args.work_dir / "data"
    make_dataset(data, classes=["a", "b"], videos_per_class=3, num_frames=(48, 64),
                 size=(96, 72), seed=1, gop=12)
    try:
        for n in args.tasks:
            emit(run(n, args, data, args.work_dir))
    finally:
        shutil.rmtree(args.work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
