"""Long runs: where the daemon's CPU goes epoch by epoch, and how close it stays to an ideal feed.

One fresh mount serves a SlowFast-size task (4 clips x 32 frames x 224x224x3 uint8 = 19 MB per
batch) on a mixed-codec dataset (H.264, HEVC, VP9, MPEG-4; 340x256, one keyframe per video). A
reader reads every batch in order and sleeps --gpu-ms after each (a GPU step that leaves the
CPU free). After each epoch one JSON line gives that epoch's figures: the daemon's CPU seconds
(from /proc, all its threads: a busy machine does not inflate them), frames decoded, aug ops,
frames carried and read back, store bytes written and read, evictions and rebuilds, the daemon's
RSS and peak RSS, the cache dir's size, the bytes the kernel wrote to disk meanwhile (the whole
machine's: a store that outgrows the writeback threshold shows here,
docs/performance.md#the-store-and-the-disk)
and the reader's waits. The last line sums it up (with the store's budget, as the daemon sized
it or as given):

- cpu_per_batch_s by epoch, and its slope over the run (it must not grow with the epochs);
- ratio_to_ideal_steady: the GPU-busy share after epoch 0 against an ideal feed's. The ideal
  feed serves every batch from the daemon's memory; its wait per batch is measured on the same
  run, as the median wait of batches that were already `ready` (user.sand.state) when opened.
  On a busy machine these waits are noisy, and they grow with the daemon's own load: compare
  runs on gpu_busy_steady and wait_s_steady (the reader's waits after epoch 0) as well, with
  the ideal's waits beside them (ideal_wait_s_steady). ratio_cpu_bound_steady is the best
  ratio the measured CPU (daemon and reader, per batch after epoch 0) allows on the machine's
  cores;
- memory: the daemon's peak RSS against the mount's memory_limit (the overhead beyond it).

The machine may be shared: every figure used for decisions is CPU seconds, and `cpu_others_s`
says how much CPU other processes took meanwhile (wall-clock waits are noisy when it is high).

    .venv/bin/python benchmarks/bench_long.py --quick
    .venv/bin/python benchmarks/bench_long.py --epochs 30
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import (
    compile_sandfs,
    emit,
    machine_busy_cores,
    machine_cpu_seconds,
    machine_info,
    machine_written_bytes,
    run_guarded,
    sandfs_mount,
    settle_disk,
    tree_cpu_seconds,
)

from sandfs.config.loader import load_task_config
from sandfs.config.settings import default_memory_limit, parse_size

# (codec, extension): what real datasets mix; each a quarter of the videos
CODECS = (("libx264", ".mp4"), ("libx265", ".mp4"), ("libvpx-vp9", ".webm"), ("mpeg4", ".mp4"))
DEFAULTS = {"full": {"videos": 32, "epochs": 30, "frames": (200, 250)},
            "quick": {"videos": 8, "epochs": 12, "frames": (120, 160)}}
COUNTERS = ("frames_decoded", "aug_ops", "aug_ops_independent", "frames_carried",
            "frames_from_disk", "views_materialized")
CACHE_COUNTERS = ("bytes_written", "bytes_read", "puts", "hits", "misses", "evictions",
                  "recomputed")
SCHED_COUNTERS = ("evicted_unread", "rebuilt_from_disk", "clips_recomputed", "jobs_done")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="8 videos, 12 epochs (a few minutes) instead of 32 and 30")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--videos", type=int, help="a multiple of 4 (one codec each)")
    parser.add_argument("--gpu-ms", type=float, default=40.0, help="GPU step per batch")
    parser.add_argument("--k-epochs", type=int, default=5)
    parser.add_argument("--decode-ahead", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", help="engine.memory_limit (default: sandfs's)")
    parser.add_argument("--budget", help="the cache's storage budget, e.g. 16G (default: "
                        "sandfs's, a quarter of the free disk)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sandfs-bench"))
    args = parser.parse_args()
    for key, value in DEFAULTS["quick" if args.quick else "full"].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.videos % len(CODECS) or args.videos < len(CODECS):
        parser.error(f"--videos must be a positive multiple of {len(CODECS)}")
    return args


# -- the dataset and the task -----------------------------------------------------------------


def ensure_mixed_dataset(data_dir: Path, videos: int, frames: tuple[int, int]) -> Path:
    """ROOT/classNN/*.{mp4,webm}: `videos` noisy 340x256 25 fps videos, one keyframe each,
    the codecs of CODECS in turn; generated once."""
    import random

    from sandfs.media.synth import write_test_video

    root = data_dir / f"mixed{videos}-{frames[0]}to{frames[1]}"
    if (root / "DONE").exists():
        return root
    partial = root.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    rng = random.Random(0)
    for i in range(videos):
        codec, ext = CODECS[i % len(CODECS)]
        folder = partial / f"class{i % 4:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        write_test_video(folder / f"v{i:03d}{ext}", num_frames=rng.randint(*frames), width=340,
                         height=256, codec=codec, gop=250, noise=True, seed=i)
    (partial / "DONE").write_text("")
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root


def write_config(path: Path, dataset: Path, epochs: int, memory_limit: str | None) -> None:
    config = {
        "task": "slowfast", "seed": 0, "epochs": epochs,
        "dataset": {
            "tag": "train", "input_source": "file", "video_dataset_path": str(dataset),
            "extensions": [".mp4", ".webm"], "labels": "dirname",
            "sampling": {"videos_per_batch": 4, "frames_per_video": 32, "frame_stride": 2,
                         "samples_per_video": 1, "drop_last": False},
            "augmentation": [
                {"name": "crop", "branch_type": "single", "inputs": ["frame"],
                 "outputs": ["cropped"], "config": [{"random_crop": {"size": [224, 224]}}]},
                {"name": "flip", "branch_type": "single", "inputs": ["cropped"],
                 "outputs": ["flipped"],
                 "config": [{"flip": {"direction": "horizontal", "p": 0.5}}]},
            ],
        },
    }
    if memory_limit:
        config["engine"] = {"memory_limit": memory_limit}
    path.write_text(yaml.safe_dump(config, sort_keys=False))


# -- measuring --------------------------------------------------------------------------------


def rss_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def dir_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def figures(status: dict) -> dict:
    cache, sched = status.get("cache", {}), status.get("scheduler", {})
    return ({key: status.get(key, 0) for key in COUNTERS}
            | {f"store_{key}": cache.get(key, 0) for key in CACHE_COUNTERS}
            | {key: sched.get(key, 0) for key in SCHED_COUNTERS})


def read_epoch(mount, epoch: int, iterations: int, gpu_s: float) -> tuple[list, list]:
    """Read an epoch's batches in order; (waits of every batch, waits of those ready when
    opened)."""
    waits, ready_waits = [], []
    for iteration in range(iterations):
        path = mount.mountpoint / "slowfast" / str(epoch) / str(iteration) / "view"
        state = os.getxattr(path, "user.sand.state").decode()
        started = time.monotonic()
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 22):
                pass
        wait = time.monotonic() - started
        waits.append(wait)
        if state == "ready":
            ready_waits.append(wait)
        time.sleep(gpu_s)
    return waits, ready_waits


def run(args, dataset: Path, workdir: Path) -> dict:
    config = workdir / "slowfast.yaml"
    write_config(config, dataset, args.epochs, args.memory_limit)
    env = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    extra = ["--decode-ahead", str(args.decode_ahead)]
    if args.budget:
        extra += ["--budget", args.budget]
    with sandfs_mount(workdir, [config], k_epochs=args.k_epochs, workers=args.workers,
                      extra_args=extra, env=env) as mount:
        pid = int(mount.status()["pid"])
        rss_at_mount = rss_bytes(pid)[0]
        status = mount.status()
        store_budget = status["cache"]["budget_bytes"]
        iterations = status["tasks"]["slowfast"]["iterations_per_epoch"]
        cache_dir = workdir / "mnt-cache"
        before, cpu_before = figures(status), tree_cpu_seconds(mount.pid)
        machine_before = machine_cpu_seconds()[0]
        written_before = machine_written_bytes()
        all_ready_waits, epochs = [], []
        for epoch in range(args.epochs):
            reader_before = os.times()
            waits, ready_waits = read_epoch(mount, epoch, iterations, args.gpu_ms / 1e3)
            reader_cpu = sum(os.times()[:2]) - sum(reader_before[:2])
            cpu = tree_cpu_seconds(mount.pid)
            machine = machine_cpu_seconds()[0]
            after = figures(mount.status())
            rss, peak = rss_bytes(pid)
            written = machine_written_bytes()
            record = {"record": "epoch", "epoch": epoch,
                      "cpu_daemon_s": round(cpu - cpu_before, 3),
                      "cpu_per_batch_s": round((cpu - cpu_before) / iterations, 4),
                      "cpu_others_s": round(max(0.0, machine - machine_before
                                                - (cpu - cpu_before) - reader_cpu), 2),
                      **{key: after[key] - before[key] for key in after},
                      "rss_bytes": rss, "peak_rss_bytes": peak,
                      "cache_dir_bytes": dir_bytes(cache_dir),
                      "disk_written_bytes": written - written_before,
                      "wait_s_total": round(sum(waits), 3),
                      "cpu_reader_s": round(reader_cpu, 3),
                      "batches_ready_at_open": len(ready_waits)}
            emit(record)
            epochs.append(record)
            all_ready_waits += ready_waits
            before, cpu_before, machine_before, written_before = after, cpu, machine, written
            if epoch > 0:
                record["waits"] = waits
    limit = (parse_size(args.memory_limit) if args.memory_limit
             else default_memory_limit([load_task_config(str(config))], args.workers))
    return summarize(args, epochs, all_ready_waits, iterations) | memory_figures(
        epochs, limit, rss_at_mount) | {"store_budget_bytes": store_budget}


def memory_figures(epochs: list[dict], limit: int, rss_at_mount: int) -> dict:
    """The daemon's peak RSS against its memory_limit (batches and on-demand objects): what it
    holds beyond the limit is the interpreter and libraries (RSS once mounted) and working
    room the limit does not count."""
    peak = max(e["peak_rss_bytes"] for e in epochs)
    return {"memory_limit_bytes": limit, "rss_at_mount_bytes": rss_at_mount,
            "peak_rss_bytes": peak, "peak_rss_over_limit_bytes": peak - limit}


def summarize(args, epochs: list[dict], ready_waits: list[float], iterations: int) -> dict:
    gpu_s = args.gpu_ms / 1e3
    ideal_wait = statistics.median(ready_waits) if ready_waits else None
    steady = [w for e in epochs[1:] for w in e.pop("waits", [])]
    ratio = sandfs_busy = ideal_busy = None
    if ideal_wait is not None and steady:
        sandfs_busy = len(steady) * gpu_s / (len(steady) * gpu_s + sum(steady))
        ideal_busy = gpu_s / (gpu_s + ideal_wait)
        ratio = round(sandfs_busy / ideal_busy, 3)
    per_batch = [e["cpu_per_batch_s"] for e in epochs]
    slope = _slope(per_batch[1:]) if len(per_batch) > 2 else None
    steady_batches = max(1, (len(epochs) - 1) * iterations)
    steady_cpu = sum(e["cpu_daemon_s"] + e["cpu_reader_s"] for e in epochs[1:]) / steady_batches
    cpu_bound = None
    if ideal_wait is not None and steady_cpu:
        cores = os.cpu_count() or 1
        cpu_bound = round(min(1.0, cores * (gpu_s + ideal_wait) / steady_cpu), 3)
    totals = {key: sum(e[key] for e in epochs) for key in
              ("frames_decoded", "aug_ops", "frames_carried", "frames_from_disk",
               "store_bytes_written", "store_bytes_read", "store_evictions", "evicted_unread",
               "rebuilt_from_disk", "clips_recomputed", "cpu_daemon_s", "cpu_others_s",
               "disk_written_bytes")}
    return {"record": "summary", "epochs": len(epochs), "iterations_per_epoch": iterations,
            "output_frames": len(epochs) * iterations * 4 * 32,
            "cpu_per_batch_s": per_batch,
            "cpu_per_batch_slope_per_epoch": slope,
            "cpu_per_batch_first10": _mean(per_batch[:10]),
            "cpu_per_batch_last10": _mean(per_batch[-10:]),
            "ideal_wait_ms": None if ideal_wait is None else round(ideal_wait * 1e3, 1),
            "ratio_to_ideal_steady": ratio,
            # the ratio's two sides: a busier machine slows the ideal's reads too, so a change
            # that only adds contention raises the ratio; compare runs on these and the waits
            "gpu_busy_steady": _round(sandfs_busy), "gpu_busy_ideal": _round(ideal_busy),
            "wait_s_steady": round(sum(steady), 2),
            "ideal_wait_s_steady": _round(ideal_wait and ideal_wait * len(steady), 2),
            # the best steady ratio this CPU use allows on os.cpu_count() cores of its own:
            # each batch's daemon and reader CPU spread over the cores while the GPU step runs
            "ratio_cpu_bound_steady": cpu_bound,
            "cpu_per_batch_steady_s": round(steady_cpu, 4),
            "cache_dir_bytes_max": max(e["cache_dir_bytes"] for e in epochs),
            **{key: round(value, 2) for key, value in totals.items()}}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _slope(values: list[float]) -> float:
    """Least-squares slope of values against their index."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    den = sum((x - mean_x) ** 2 for x in range(n))
    return round(num / den, 5)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    compile_sandfs()
    settle_disk()
    dataset = ensure_mixed_dataset(args.data_dir, args.videos, tuple(args.frames))
    busy = machine_busy_cores()
    emit({"record": "params", "bench": "long", **{k: str(v) if isinstance(v, Path) else v
                                                   for k, v in vars(args).items()},
          "dataset": str(dataset), "busy_cores_before_start": busy, "machine": machine_info()})
    workdir = Path(tempfile.mkdtemp(prefix="long-", dir=args.work_dir))
    return run_guarded(args.work_dir, lambda: emit(run(args, dataset, workdir)))


if __name__ == "__main__":
    sys.exit(main())
