"""End-to-end training input: the on-demand CPU baseline vs sandfs vs an ideal feed.

Scenarios: `single` (one task), `search4` (a 4-task hyperparameter search: four copies of one
task with the same seed and pipeline), `hetero` (a SlowFast-like and a VideoMAE-like task on one
dataset). Each runs in two modes: `raw` (read batches as fast as possible) and `gpu` (every batch
is followed by --gpu-ms of sleep, a GPU step that leaves the CPU free).

- baseline: per task, a torch DataLoader (2 workers) whose Dataset seeks with PyAV to the keyframe
  before a random clip, decodes single-threaded to the last needed frame and applies the task's
  ops (sandfs.ops) — every task and epoch decodes its own clips.
- sandfs: one fresh mount (empty cache dir) serving all tasks of the scenario, one reader
  process per task reading MNT/TASK/EPOCH/ITERATION/view and its labels xattr in order.
- ideal: right after the sandfs pass, a second timed pass over the same mount, when every view
  is already materialized in the daemon (checked with status.json's views_materialized).

One JSON object per line: a `params` line, a `run` line per measurement and a `summary` line per
scenario and mode (medians over --repeats, ratios taken within one repeat).

    .venv/bin/python benchmarks/bench_e2e.py --quick
    .venv/bin/python benchmarks/bench_e2e.py --scenario search4 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import torch
import yaml
from common import (
    DatasetSpec,
    emit,
    ensure_dataset,
    fill_defaults,
    kill_tree,
    machine_busy_cores,
    machine_cpu_seconds,
    machine_info,
    median_or_none,
    sandfs_mount,
    summary,
    tree_cpu_seconds,
)
from torch.utils.data import DataLoader, Dataset, Sampler

from sandfs.ops import apply_chain, draw_chain, validate_op
from tests.helpers.mountwatch import mounts_under

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SCENARIOS = {
    "single": [("single", "single.yaml")],
    "search4": [(f"search{i}", "single.yaml") for i in range(4)],
    "hetero": [("slowfast", "slowfast.yaml"), ("mae", "mae.yaml")],
}
MODES = ("raw", "gpu")
CLASSES = 4
# Videos in multiples of 16 make an even number of batches of 8 per epoch, a multiple of the 2
# DataLoader workers, so the baseline loses no worker time to a lone last batch per epoch.
DEFAULTS = {"full": {"videos": 16, "epochs": 10, "repeats": 3},
            "quick": {"videos": 16, "epochs": 6, "repeats": 1}}
BUSY_MACHINE_CORES = 0.2  # others' load above which the figures are flagged as noisy
SETUP_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 3600.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="6 epochs and 1 repeat (~2-3 min) instead of 10 and 3 (~9-12 min)")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--videos", type=int, help=f"dataset size, a multiple of {CLASSES} "
                        "classes (default 16)")
    parser.add_argument("--epochs", type=int, help="epochs per task (default 10, quick 6)")
    parser.add_argument("--repeats", type=int, help="runs per measurement (default 3, quick 1)")
    parser.add_argument("--gpu-ms", type=float, default=40.0,
                        help="simulated GPU step per batch, ms (default 40)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--k-epochs", type=int, default=5, help="sandfs --k-epochs")
    parser.add_argument("--decode-ahead", type=int, default=3,
                        help="sandfs --decode-ahead (default 3, sandfs's default; 0: off)")
    parser.add_argument("--bframes", type=int, default=0,
                        help="B-frames between references in the dataset's videos (default 0; "
                             "real H.264 encodes usually have 2-3)")
    parser.add_argument("--workers", type=int, default=2,
                        help="sandfs --workers and DataLoader num_workers per task")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sandfs-bench"),
                        help="mounts, cache dirs and daemon logs go in a temp folder here")
    args = parser.parse_args()
    fill_defaults(parser, args, DEFAULTS, positive=list(DEFAULTS["full"]))
    if args.videos % CLASSES:
        parser.error(f"--videos must be a multiple of {CLASSES}")
    if args.epochs <= args.k_epochs:
        print(f"note: --epochs {args.epochs} <= --k-epochs {args.k_epochs}: no window boundary "
              "is crossed", file=sys.stderr)
    return args


# -- task configs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSpec:
    name: str
    config_path: Path  # the filled-in config, for sandfs
    config: dict  # the same config, for the baseline

    @property
    def sampling(self) -> dict:
        return self.config["dataset"]["sampling"]

    @property
    def clips_per_batch(self) -> int:
        return self.sampling["videos_per_batch"] * self.sampling.get("samples_per_video", 1)


def write_task_configs(scenario: str, dataset_root: Path, epochs: int,
                       out_dir: Path) -> list[TaskSpec]:
    specs = []
    for task, template in SCENARIOS[scenario]:
        config = yaml.safe_load((CONFIG_DIR / template).read_text())
        config["task"], config["epochs"] = task, epochs
        config["dataset"]["video_dataset_path"] = str(dataset_root)
        path = out_dir / f"{task}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        specs.append(TaskSpec(task, path, config))
    return specs


# -- the on-demand baseline -------------------------------------------------------------------


def chain_ops(config: dict) -> list[tuple[str, tuple]]:
    """The config's ops in order, validated by sandfs.ops (single-branch steps only)."""
    ops = []
    for step in config["dataset"]["augmentation"]:
        if step["branch_type"] != "single":
            raise ValueError(f"the baseline runs single-branch steps only, not {step['name']!r}")
        for op in step["config"]:
            ((name, params),) = op.items()
            ops.append((name, validate_op(name, params)))
    return ops


def labelled_videos(dataset_root: Path) -> list[tuple[str, int]]:
    """(path, label index) with labels from the class folder names, sorted (as sandfs's
    `labels: dirname`)."""
    classes = sorted(p.name for p in dataset_root.iterdir() if p.is_dir())
    return [(str(path), label) for label, name in enumerate(classes)
            for path in sorted((dataset_root / name).glob("*.mp4"))]


def decode_needed(container: av.container.InputContainer, first_index: int,
                  needed: set[int]) -> tuple[dict[int, np.ndarray], int]:
    """Seek to the keyframe at or before frame `first_index`, decode single-threaded up to the
    last needed frame; RGB for the needed ones. Returns (frames by index, frames decoded)."""
    stream = container.streams.video[0]
    fps, time_base, start_pts = stream.average_rate, stream.time_base, stream.start_time or 0
    container.seek(start_pts + int(first_index / (fps * time_base)), backward=True,
                   stream=stream)
    frames, decoded, last = {}, 0, max(needed)
    for frame in container.decode(stream):
        decoded += 1
        index = round((frame.pts - start_pts) * time_base * fps)
        if index in needed:
            frames[index] = frame.reformat(format="rgb24", threads=1).to_ndarray()
        if index >= last:
            break
    if len(frames) != len(needed):
        raise RuntimeError(f"{container.name}: decoded {len(frames)} of {len(needed)} frames")
    return frames, decoded


class OnDemandClips(Dataset):
    """Item (epoch, index): `samples_per_video` random clips of video `index` (uniform over the
    valid starts, seeded by epoch and index), decoded in one seek + forward pass, augmented."""

    def __init__(self, videos: list[tuple[str, int]], config: dict) -> None:
        sampling = config["dataset"]["sampling"]
        self.videos, self.seed = videos, config["seed"]
        self.frames_per_clip, self.stride = sampling["frames_per_video"], sampling["frame_stride"]
        self.samples = sampling.get("samples_per_video", 1)
        self.span_frames = (self.frames_per_clip - 1) * self.stride + 1
        self.ops = chain_ops(config)

    def __len__(self) -> int:
        return len(self.videos)

    def __getitem__(self, key: tuple[int, int]):
        epoch, index = key
        path, label = self.videos[index]
        rng = np.random.default_rng([self.seed, epoch, index])
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.thread_type, stream.codec_context.thread_count = "SLICE", 1
            max_start = stream.frames - self.span_frames
            starts = [int(rng.integers(0, max_start + 1)) for _ in range(self.samples)]
            clip_indices = [range(s, s + self.span_frames, self.stride) for s in starts]
            frames, decoded = decode_needed(container, min(starts),
                                            {i for clip in clip_indices for i in clip})
        clips = []
        for indices in clip_indices:
            height, width = frames[indices[0]].shape[:2]
            ops = draw_chain(self.ops, rng, (height, width))
            clips.append(np.stack(apply_chain(ops, [frames[i] for i in indices])))
        return torch.from_numpy(np.stack(clips)), label, decoded


class EpochShuffle(Sampler):
    """shuffle=True with a per-epoch seed (DistributedSampler's set_epoch idiom); yields
    (epoch, index) so the Dataset's randomness is seeded by both."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        return ((self.epoch, int(i)) for i in order)


def single_threaded_worker(worker_id: int) -> None:
    cv2.setNumThreads(1)  # 2 workers on 2 cores: no oversubscription inside OpenCV


class BaselineFeed:
    """One task's batches from its own DataLoader, epoch by epoch."""

    def __init__(self, task: TaskSpec, dataset_root: Path, workers: int) -> None:
        dataset = OnDemandClips(labelled_videos(dataset_root), task.config)
        self.sampler = EpochShuffle(len(dataset), task.config["seed"])
        self.loader = DataLoader(dataset, batch_size=task.sampling["videos_per_batch"],
                                 sampler=self.sampler, num_workers=workers,
                                 persistent_workers=True, worker_init_fn=single_threaded_worker)
        self.frames_decoded = 0

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, list[int]]]:
        self.sampler.set_epoch(epoch)
        for clips, labels, decoded in self.loader:
            self.frames_decoded += int(decoded.sum())
            samples = clips.shape[1]
            yield clips.flatten(0, 1).numpy(), labels.repeat_interleave(samples).tolist()


# -- the sandfs reader ------------------------------------------------------------------------


class SandfsFeed:
    """One task's batches read from the mount, epoch by epoch, in iteration order."""

    def __init__(self, mountpoint: Path, task: str) -> None:
        self.task_dir = mountpoint / task
        self.frames_decoded = None  # the daemon's figure comes from status.json

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, list[int]]]:
        epoch_dir = self.task_dir / str(epoch)
        for iteration in sorted(int(n) for n in os.listdir(epoch_dir) if n.isdigit()):
            path = epoch_dir / str(iteration) / "view"
            with open(path, "rb") as f:
                batch = np.load(f)
            meta = json.loads(os.getxattr(path, "user.sand.meta"))
            yield batch, [sample["label_index"] for sample in meta["samples"]]


# -- trainer processes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainerJob:
    task: TaskSpec
    epochs: int
    gpu_s: float
    make_feed: Callable[[], BaselineFeed | SandfsFeed]


def train(job: TrainerJob, feed: BaselineFeed | SandfsFeed) -> dict:
    """Read every batch of every epoch; after each, sleep `gpu_s` (the simulated GPU step)."""
    waits_s, epoch_starts, clips = [], [], 0
    cpu_start_s = tree_cpu_seconds(os.getpid())
    self_start = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    for epoch in range(job.epochs):
        for index, (batch, wait_s) in enumerate(timed(feed.epoch(epoch))):
            waits_s.append(wait_s)
            epoch_starts.append(epoch if index == 0 else None)
            check_batch(job.task, *batch)
            clips += len(batch[1])
            if job.gpu_s:
                time.sleep(job.gpu_s)
    finished = time.monotonic()
    self_end = resource.getrusage(resource.RUSAGE_SELF)
    return {"task": job.task.name, "started": started, "finished": finished,
            "clips": clips, "waits_s": waits_s, "epoch_starts": epoch_starts,
            "cpu_tree_s": tree_cpu_seconds(os.getpid()) - cpu_start_s,
            "cpu_main_s": (self_end.ru_utime + self_end.ru_stime
                           - self_start.ru_utime - self_start.ru_stime),
            "frames_decoded": feed.frames_decoded}


def timed(batches: Iterator) -> Iterator[tuple[object, float]]:
    """(batch, seconds the trainer waited for it)."""
    while True:
        asked = time.monotonic()
        batch = next(batches, None)
        if batch is None:
            return
        yield batch, time.monotonic() - asked


def check_batch(task: TaskSpec, clips: np.ndarray, labels: list[int]) -> None:
    sampling = task.sampling
    if (clips.dtype != np.uint8 or clips.shape[1] != sampling["frames_per_video"]
            or clips.shape[0] != len(labels) or clips.shape[0] > task.clips_per_batch
            or None in labels):
        raise RuntimeError(f"task {task.name}: bad batch {clips.shape} {clips.dtype}, "
                           f"labels {labels}")


def trainer_main(job: TrainerJob, barrier, results) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    try:
        feed = job.make_feed()
        barrier.wait(timeout=SETUP_TIMEOUT_S)
        results.put(train(job, feed))
    except BaseException:
        barrier.abort()
        results.put({"task": job.task.name, "error": traceback.format_exc()})


def run_trainers(jobs: list[TrainerJob], tree_pid: int | None = None) -> dict:
    """One process per job, started together. With `tree_pid`, also the CPU seconds of that
    process tree when they start and when they have all finished."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(len(jobs) + 1), context.Queue()
    processes = [context.Process(target=trainer_main, args=(job, barrier, results),
                                 name=f"trainer-{job.task.name}") for job in jobs]
    try:
        for process in processes:
            process.start()
        try:
            barrier.wait(timeout=SETUP_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"a trainer failed to start:\n{results.get(timeout=10)}") from None
        cpu_at_start_s = tree_cpu_seconds(tree_pid) if tree_pid else None
        machine_at_start_s = machine_cpu_seconds()
        trainer_results = [results.get(timeout=RUN_TIMEOUT_S) for _ in jobs]
        busy_s, steal_s = np.subtract(machine_cpu_seconds(), machine_at_start_s)
        cpu_at_end_s = tree_cpu_seconds(tree_pid) if tree_pid else None
        for result in trainer_results:
            if "error" in result:
                raise RuntimeError(f"trainer {result['task']} failed:\n{result['error']}")
        for process in processes:
            process.join(timeout=60)
    finally:
        for process in processes:
            if process.is_alive():  # unreaped, so its pid is still its own
                kill_tree(process.pid)
            process.join()
    return {"trainers": trainer_results, "cpu_at_start_s": cpu_at_start_s,
            "cpu_at_end_s": cpu_at_end_s, "machine_busy_s": float(busy_s),
            "machine_steal_s": float(steal_s)}


# -- measurements -----------------------------------------------------------------------------


def measure_baseline(tasks: list[TaskSpec], dataset_root: Path, args, gpu_s: float) -> dict:
    jobs = [TrainerJob(task, args.epochs, gpu_s,
                       lambda task=task: BaselineFeed(task, dataset_root, args.workers))
            for task in tasks]
    run = run_trainers(jobs)
    trainers = run["trainers"]
    cpu_s = sum(t["cpu_tree_s"] for t in trainers)
    figures = feed_figures(run, gpu_s)
    return {**figures, **cpu_figures(cpu_s, figures["wall_s"]),
            "cpu_loader_workers_s": round(cpu_s - sum(t["cpu_main_s"] for t in trainers), 2),
            "frames_decoded": sum(t["frames_decoded"] for t in trainers),
            **noise_figures(run, own_cpu_s=cpu_s)}


def measure_sandfs(tasks: list[TaskSpec], workdir: Path, args, gpu_s: float) -> tuple[dict, dict]:
    """The sandfs pass on a fresh mount, then the ideal pass on the same (now warm) mount. The
    sandfs pass is charged the daemon's CPU from the moment it served (a scheduler may start
    before the first read: `head_start_s` says how long the readers took to start)."""
    with sandfs_mount(workdir, [t.config_path for t in tasks], k_epochs=args.k_epochs,
                      workers=args.workers,
                      extra_args=["--decode-ahead", str(args.decode_ahead)]) as mount:
        jobs = [TrainerJob(task, args.epochs, gpu_s,
                           lambda task=task: SandfsFeed(mount.mountpoint, task.name))
                for task in tasks]
        status_ready = mount.status()
        cold = run_trainers(jobs, tree_pid=mount.pid)
        status_cold = mount.status()
        dropped = drop_page_cache()
        warm = run_trainers(jobs, tree_pid=mount.pid)
        status_warm = mount.status()
    sandfs = sandfs_record(cold, cold["cpu_at_end_s"] - mount.ready_cpu_s,
                           daemon_figures(status_ready, status_cold), gpu_s)
    sandfs["mount_s"] = round(mount.mount_s, 2)
    sandfs["head_start_s"] = round(min(t["started"] for t in cold["trainers"]) - mount.ready_at, 3)
    sandfs["cpu_daemon_head_start_s"] = round(cold["cpu_at_start_s"] - mount.ready_cpu_s, 2)
    ideal = sandfs_record(warm, warm["cpu_at_end_s"] - warm["cpu_at_start_s"],
                          daemon_figures(status_cold, status_warm), gpu_s)
    ideal["ideal_page_cache_dropped"] = dropped
    return sandfs, ideal | ideal_verdict(ideal["views_materialized"])


def drop_page_cache() -> bool:
    """Empty the kernel's page cache (root only), so that the ideal pass reads every view from
    the daemon's memory through FUSE as the sandfs pass did, not from pages the sandfs pass
    left in the kernel (views are served with keep_cache)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("1")
        return True
    except OSError:
        return False


def daemon_figures(status_before: dict, status_after: dict) -> dict:
    """What status.json's counters say happened between two readings."""
    def delta(key: str) -> int:
        return status_after[key] - status_before[key]

    stalls_s = {name: round(task["stall_seconds"]
                            - status_before["tasks"][name]["stall_seconds"], 3)
                for name, task in status_after["tasks"].items()}
    return {"stall_s": stalls_s, "stall_s_total": round(sum(stalls_s.values()), 3),
            "frames_decoded": delta("frames_decoded"),
            "frames_decoded_independent": delta("frames_decoded_independent"),
            "views_materialized": delta("views_materialized"),
            "daemon_memory_bytes": status_after["memory_bytes"]}


def sandfs_record(run: dict, daemon_cpu_s: float, daemon: dict, gpu_s: float) -> dict:
    readers_cpu_s = sum(t["cpu_tree_s"] for t in run["trainers"])
    daemon_cpu_while_reading_s = run["cpu_at_end_s"] - run["cpu_at_start_s"]
    figures = feed_figures(run, gpu_s)
    return {**figures, **cpu_figures(daemon_cpu_s + readers_cpu_s, figures["wall_s"]),
            "cpu_daemon_s": round(daemon_cpu_s, 2),
            "cpu_readers_s": round(readers_cpu_s, 2), **daemon,
            **noise_figures(run, own_cpu_s=daemon_cpu_while_reading_s + readers_cpu_s)}


def ideal_verdict(views_materialized: int) -> dict:
    held = views_materialized == 0
    note = ("every view was already in the daemon's memory: sandfs with perfect prefetching, "
            "FUSE included" if held else
            f"NOT IDEAL: the daemon materialized {views_materialized} views again in the "
            f"second pass (it could not hold them all)")
    return {"ideal_held_all_views": held, "ideal_note": note}


def cpu_figures(cpu_s: float, wall_s: float) -> dict:
    """The feed's CPU seconds and the cores it kept busy on average (of os.cpu_count())."""
    return {"cpu_s": round(cpu_s, 2), "cores_used": round(cpu_s / wall_s, 2)}


def noise_figures(run: dict, own_cpu_s: float) -> dict:
    """CPU seconds that others used during the run: processes outside this measurement (e.g.
    tests running beside it) and other guests of the hypervisor (steal)."""
    return {"cpu_others_s": round(max(0.0, run["machine_busy_s"] - own_cpu_s), 2),
            "cpu_steal_s": round(run["machine_steal_s"], 2)}


def feed_figures(run: dict, gpu_s: float) -> dict:
    """Throughput over all tasks (batches / wall, wall from the first start to the last end),
    the per-batch data wait, waits at epoch starts and, with a GPU step, the GPU-busy share."""
    trainers = run["trainers"]
    wall_s = max(t["finished"] for t in trainers) - min(t["started"] for t in trainers)
    batches = sum(len(t["waits_s"]) for t in trainers)
    clips = sum(t["clips"] for t in trainers)
    waits_ms = [w * 1e3 for t in trainers for w in t["waits_s"]]
    figures = {"wall_s": round(wall_s, 3), "batches": batches,
               "batches_per_s": round(batches / wall_s, 3),
               "clips_per_s": round(clips / wall_s, 2),
               "wait_ms": summary(waits_ms, 1),
               **epoch_start_waits(trainers),
               "waits_ms_by_task": {t["task"]: [round(w * 1e3, 1) for w in t["waits_s"]]
                                    for t in trainers}}
    if gpu_s:
        busy = [len(t["waits_s"]) * gpu_s / (t["finished"] - t["started"]) for t in trainers]
        figures["gpu_busy"] = round(sum(busy) / len(busy), 3)
        figures["gpu_busy_min"] = round(min(busy), 3)
        figures["gpu_busy_steady"] = round(min(steady_gpu_busy(t, gpu_s) for t in trainers), 3)
    return figures


def steady_gpu_busy(trainer: dict, gpu_s: float) -> float:
    """The GPU-busy share after the trainer's first epoch (the cold start left out, window
    boundaries kept): GPU steps / (GPU steps + data waits) over those batches."""
    starts = [i for i, epoch in enumerate(trainer["epoch_starts"]) if epoch is not None]
    waits = trainer["waits_s"][starts[1] if len(starts) > 1 else 0:]
    return len(waits) * gpu_s / (len(waits) * gpu_s + sum(waits)) if waits else 0.0


def epoch_start_waits(trainers: list[dict]) -> dict:
    """Data wait (ms) of each epoch's first batch, median over tasks, by epoch; and the median
    wait of all other batches, to compare."""
    by_epoch: dict[int, list[float]] = {}
    others = []
    for trainer in trainers:
        for wait_s, epoch in zip(trainer["waits_s"], trainer["epoch_starts"], strict=True):
            if epoch is None:
                others.append(wait_s * 1e3)
            else:
                by_epoch.setdefault(epoch, []).append(wait_s * 1e3)
    return {"epoch_start_wait_ms": [median_or_none(by_epoch[e], 1) for e in sorted(by_epoch)],
            "other_wait_ms_median": median_or_none(others, 1)}


# -- the run ----------------------------------------------------------------------------------


def run_scenario(scenario: str, dataset_root: Path, workdir: Path, args, params: dict) -> None:
    config_dir = workdir / f"configs-{scenario}"
    config_dir.mkdir()
    tasks = write_task_configs(scenario, dataset_root, args.epochs, config_dir)
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for repeat in range(args.repeats):
        for mode in args.modes:
            gpu_s = args.gpu_ms / 1e3 if mode == "gpu" else 0.0
            measured = measure_pair(tasks, dataset_root, workdir, args, gpu_s,
                                    sandfs_first=bool(repeat % 2))
            for system, figures in measured.items():
                emit({"record": "run", "scenario": scenario, "mode": mode, "repeat": repeat,
                      "system": system, **figures})
            runs[mode].append(measured)
    for mode, measured in runs.items():
        emit(summary_record(scenario, mode, measured, tasks, params))


def measure_pair(tasks, dataset_root, workdir, args, gpu_s, *, sandfs_first: bool) -> dict:
    """Baseline and sandfs (+ ideal) back to back, in alternating order across repeats."""
    measured = {}
    steps = ["baseline", "sandfs"]
    for step in reversed(steps) if sandfs_first else steps:
        if step == "baseline":
            measured["baseline"] = measure_baseline(tasks, dataset_root, args, gpu_s)
        else:
            measured["sandfs"], measured["ideal"] = measure_sandfs(tasks, workdir, args, gpu_s)
    return measured


COMMON_KEYS = ("batches_per_s", "clips_per_s", "wall_s", "gpu_busy", "gpu_busy_steady", "cpu_s",
               "cores_used", "cpu_others_s", "cpu_steal_s")
SUMMARY_KEYS = {
    "baseline": (*COMMON_KEYS, "cpu_loader_workers_s", "frames_decoded"),
    "sandfs": (*COMMON_KEYS, "cpu_daemon_s", "stall_s_total", "frames_decoded",
               "frames_decoded_independent", "views_materialized", "mount_s", "head_start_s"),
    "ideal": COMMON_KEYS,
}


def summary_record(scenario: str, mode: str, measured: list[dict], tasks, params) -> dict:
    """Medians over the repeats; each ratio is taken within one repeat, then the median."""
    record = {"record": "summary", "scenario": scenario, "mode": mode,
              "tasks": [t.name for t in tasks], "repeats": len(measured)}
    for system, keys in SUMMARY_KEYS.items():
        runs = [m[system] for m in measured]
        record[system] = {key: median_or_none([run.get(key) for run in runs]) for key in keys}
        record[system]["wait_ms_p90"] = median_or_none([run["wait_ms"]["p90"] for run in runs], 1)
        record[system]["epoch_start_wait_ms"] = [
            median_or_none(waits, 1) for waits in zip(*(run["epoch_start_wait_ms"] for run in runs),
                                                      strict=True)]
    record["ideal"]["held_all_views"] = all(m["ideal"]["ideal_held_all_views"] for m in measured)
    for numerator, denominator in (("sandfs", "baseline"), ("sandfs", "ideal"),
                                   ("ideal", "baseline")):
        record[f"ratio_{numerator}_over_{denominator}"] = median_or_none(
            [m[numerator]["batches_per_s"] / m[denominator]["batches_per_s"] for m in measured])
    if mode == "gpu":  # the "within 15% of ideal in steady state" target
        record["ratio_sandfs_over_ideal_steady"] = median_or_none(
            [m["sandfs"]["gpu_busy_steady"] / m["ideal"]["gpu_busy_steady"] for m in measured])
    return {**record, "params": params}


def raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    args = parse_args()
    # Ctrl-C and SIGTERM (even as a background job, where SIGINT starts ignored) raise
    # KeyboardInterrupt, so the finally blocks unmount and stop every process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    spec = DatasetSpec(classes=CLASSES, videos_per_class=args.videos // CLASSES,
                       bframes=args.bframes)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    dataset_root = ensure_dataset(args.data_dir, spec)
    params = {"quick": args.quick, "videos": args.videos, "epochs": args.epochs,
              "repeats": args.repeats, "gpu_ms": args.gpu_ms, "k_epochs": args.k_epochs,
              "decode_ahead": args.decode_ahead, "workers": args.workers,
              "dataset": spec.name, "modes": args.modes}
    busy_cores = machine_busy_cores()
    if busy_cores > BUSY_MACHINE_CORES:
        print(f"warning: other processes keep {busy_cores} cores busy: expect noisy figures "
              "(see cpu_others_s)", file=sys.stderr)
    emit({"record": "params", "bench": "e2e", **params, "dataset_root": str(dataset_root),
          "machine": machine_info(), "busy_cores_before_start": busy_cores})
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=args.work_dir))
    try:
        for scenario in scenarios:
            run_scenario(scenario, dataset_root, workdir, args, params)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        left = mounts_under(args.work_dir)
        if left:
            print(f"error: mounts left behind: {left}", file=sys.stderr)
    return 1 if mounts_under(args.work_dir) else 0


if __name__ == "__main__":
    sys.exit(main())
