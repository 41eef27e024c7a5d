"""End-to-end training input: the loaders users pick (PyAV, decord, torchcodec, SPDL) vs sandfs
vs an ideal feed, all making the same batches.

Scenarios: `single` (one task), `search4` (a 4-task hyperparameter search: four copies of one
task with the same seed and pipeline), `hetero` (a SlowFast-like and a VideoMAE-like task on one
dataset), all on Kinetics-like 340x256 H.264; `slowfast224` (SlowFast's real input: 4 clips x 32
frames x 224x224x3, 19 MB batches) on a dataset mixing H.264 with B-frames, VP9, MPEG-4 and HEVC
at 256x144 to 640x360; `many` (the `single` task over many short 160x120 videos, e.g.
`--videos 1024`: what the scheduler itself costs when every job is small). Each runs in two
modes: `raw` (read batches as fast as possible) and `gpu` (every batch is followed by --gpu-ms
of sleep, a GPU step that leaves the CPU free).

- peers (peers.py): per task and peer, a torch DataLoader (--workers workers) that decodes the
  clips of sandfs's own plan with the peer's library and applies the same ops (sandfs.ops):
  the same frames, crops, flips and batch shapes as the mount serves (checked: `check` lines).
- sandfs: one fresh mount (empty cache dir) serving all tasks of the scenario, one reader
  process per task reading MNT/TASK/EPOCH/ITERATION/view and its labels xattr in order.
- ideal: a feed whose every batch is ready when the reader opens it: from the sandfs pass
  itself, every batch as fast as those that were (`user.sand.state` read before each open),
  the reader's own time per batch kept. That is sandfs with perfect prefetching, FUSE included.

Every throughput twice: from the first read to the last batch, and `_cold`: from launching the
feed (`sandfs mount` on an empty cache dir: scan, plan, mount; a peer's trainer process and its
DataLoader) to the last batch. One JSON object per line: a `params` line, a `skip` line per peer
that cannot run here, `check` lines, a `run` line per measurement and a `summary` line per
scenario and mode (medians over --repeats, ratios taken within one repeat).

    .venv/bin/python benchmarks/bench_e2e.py --quick
    .venv/bin/python benchmarks/bench_e2e.py --scenario slowfast224 --peers pyav torchcodec
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from common import (
    KINETICS_KINDS,
    DatasetSpec,
    MixedDatasetSpec,
    PeakMemory,
    compile_sandfs,
    descendants_peak_rss_mb,
    emit,
    ensure_dataset,
    fill_defaults,
    kill_tree,
    machine_busy_cores,
    machine_cpu_seconds,
    machine_info,
    median_or_none,
    peak_rss_mb,
    run_guarded,
    sandfs_mount,
    settle_disk,
    summary,
    tree_cpu_seconds,
)
from gil import DEFAULT_RATE_HZ, GilSampler, py_spy
from peers import PEERS, PeerFeed, check_peer, peer_unavailable, peer_version, task_plans

from sandfs import reading
from sandfs.client import register_task

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
SCENARIOS = {
    "single": [("single", "single.yaml")],
    "search4": [(f"search{i}", "single.yaml") for i in range(4)],
    "hetero": [("slowfast", "slowfast.yaml"), ("mae", "mae.yaml")],
    "slowfast224": [("slowfast224", "slowfast224.yaml")],
    # a 4-trial search with SlowFast-size batches: identical pipelines, one object per view
    "slowfast224x4": [(f"slowfast224s{i}", "slowfast224.yaml") for i in range(4)],
    # the single task over many short small videos (--videos 1024): the scheduler's own cost
    "many": [("many", "single.yaml")],
    # SlowFast-size batches on Kinetics-like H.264, 340x256 to 720p (common.KINETICS_KINDS)
    "kinetics224": [("kinetics224", "slowfast224.yaml")],
}
# on the mixed-codec dataset; `kinetics224` on Kinetics-like H.264; `many` on 3 s 160x120 H.264;
# the others on H.264 340x256
MIXED_SCENARIOS = {"slowfast224", "slowfast224x4"}
KINETICS_SCENARIOS = {"kinetics224"}
SHORT_SCENARIOS = {"many"}
MODES = ("raw", "gpu")
CLASSES = 4
# Videos in multiples of 16 make an even number of batches per epoch, a multiple of the 2
# DataLoader workers, so no peer loses worker time to a lone last batch per epoch.
DEFAULTS = {"full": {"videos": 16, "epochs": 10, "repeats": 3, "modes": list(MODES)},
            "quick": {"videos": 16, "epochs": 6, "repeats": 1, "modes": ["raw"]}}
CHECK_BATCHES = 2  # batches of epoch 0 and of the last epoch each peer is checked on
BUSY_MACHINE_CORES = 0.2  # others' load above which the figures are flagged as noisy
SETUP_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 3600.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="6 epochs, 1 repeat, raw mode only (instead of 10, 3, both)")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--videos", type=int, help=f"dataset size, a multiple of {CLASSES} "
                        "classes (default 16)")
    parser.add_argument("--epochs", type=int, help="epochs per task (default 10, quick 6)")
    parser.add_argument("--repeats", type=int, help="runs per measurement (default 3, quick 1)")
    parser.add_argument("--gpu-ms", type=float, default=40.0,
                        help="simulated GPU step per batch, ms (default 40)")
    parser.add_argument("--modes", nargs="+", choices=MODES,
                        help="default: both (quick: raw)")
    parser.add_argument("--peers", nargs="*", choices=list(PEERS), default=list(PEERS),
                        help="peer loaders to measure (default: all; those not installed are "
                             "skipped with the reason)")
    parser.add_argument("--seed", type=int,
                        help="every task's seed (default: its config's): which clips are drawn; "
                             "with 16 videos sandfs's figures move by about 15%% from seed to "
                             "seed, the peers' hardly")
    parser.add_argument("--k-epochs", type=int, default=5, help="sandfs --k-epochs")
    parser.add_argument("--decode-ahead", type=int, default=3,
                        help="sandfs --decode-ahead (default 3, sandfs's default; 0: off)")
    parser.add_argument("--bframes", type=int, default=0,
                        help="B-frames between references in the dataset's videos (default 0; "
                             "real H.264 encodes usually have 2-3)")
    parser.add_argument("--workers", type=int, default=2,
                        help="sandfs --workers and DataLoader num_workers per task")
    parser.add_argument("--execution", choices=["threads", "processes"], default="threads",
                        help="sandfs --execution: where the daemon's video jobs run")
    parser.add_argument("--gil", action="store_true",
                        help="sample the daemon with py-spy --gil during the sandfs pass: GIL "
                             "ms per batch served, by thread (benchmarks/gil.py)")
    parser.add_argument("--gil-rate", type=int, default=DEFAULT_RATE_HZ,
                        help=f"py-spy's samples a second with --gil (default {DEFAULT_RATE_HZ})")
    parser.add_argument("--gil-raw", type=Path,
                        help="with --gil, keep py-spy's samples of each sandfs pass here, "
                             "one file a pass (collapsed stacks: flamegraph.pl, speedscope)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/sandfs-bench/data"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sandfs-bench"),
                        help="mounts, cache dirs and daemon logs go in a temp folder here")
    args = parser.parse_args()
    fill_defaults(parser, args, DEFAULTS, positive=["videos", "epochs", "repeats"])
    if args.gil and py_spy() is None:
        parser.error("--gil needs py-spy (pip install py-spy)")
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
    config_path: Path  # the filled-in config, for sandfs and the peers' plans
    frames_per_clip: int
    clips_per_batch: int


def write_task_configs(scenario: str, dataset_root: Path, extensions: list[str], epochs: int,
                       out_dir: Path, seed: int | None = None) -> list[TaskSpec]:
    specs = []
    for task, template in SCENARIOS[scenario]:
        config = yaml.safe_load((CONFIG_DIR / template).read_text())
        config["task"], config["epochs"] = task, epochs
        if seed is not None:  # other clips, for sandfs and the peers alike
            config["seed"] = seed
        config["dataset"]["video_dataset_path"] = str(dataset_root)
        config["dataset"]["extensions"] = extensions
        path = out_dir / f"{task}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        sampling = config["dataset"]["sampling"]
        specs.append(TaskSpec(task, path, sampling["frames_per_video"],
                              sampling["videos_per_batch"] * sampling.get("samples_per_video", 1)))
    return specs


# -- the sandfs reader ------------------------------------------------------------------------


class SandfsFeed:
    """One task's batches read from the mount, epoch by epoch, in iteration order, the way
    the README tells users to read them (`sandfs.reading`, which `sandfs.torch` uses too)."""

    def __init__(self, mountpoint: Path, task: str) -> None:
        self.task_dir = mountpoint / task
        self.frames_decoded = None  # the daemon's figure comes from status.json
        self.ready_at_open: list[bool] = []  # per batch read: was it made already? (the ideal)

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, list[int]]]:
        epoch_dir = self.task_dir / str(epoch)
        for iteration in sorted(int(n) for n in os.listdir(epoch_dir) if n.isdigit()):
            path = epoch_dir / str(iteration) / "view"
            self.ready_at_open.append(os.getxattr(path, "user.sand.state") == b"ready")
            batch = reading.read_view(path)
            meta = json.loads(os.getxattr(path, "user.sand.meta"))
            yield batch, [sample["label_index"] for sample in meta["samples"]]


# -- trainer processes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainerJob:
    task: TaskSpec
    epochs: int
    gpu_s: float
    make_feed: Callable[[], PeerFeed | SandfsFeed]


def train(job: TrainerJob, feed: PeerFeed | SandfsFeed) -> dict:
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
            "frames_decoded": feed.frames_decoded,
            "ready_at_open": getattr(feed, "ready_at_open", None)}


def timed(batches: Iterator) -> Iterator[tuple[object, float]]:
    """(batch, seconds the trainer waited for it)."""
    while True:
        asked = time.monotonic()
        batch = next(batches, None)
        if batch is None:
            return
        yield batch, time.monotonic() - asked


def check_batch(task: TaskSpec, clips: np.ndarray, labels: list[int]) -> None:
    if (clips.dtype != np.uint8 or clips.shape[1] != task.frames_per_clip
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
    process tree when they start and when they have all finished. The peak RSS is that of the
    trainers (with their DataLoader workers) and `tree_pid`'s tree together."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(len(jobs) + 1), context.Queue()
    processes = [context.Process(target=trainer_main, args=(job, barrier, results),
                                 name=f"trainer-{job.task.name}") for job in jobs]
    launched_at = time.monotonic()
    try:
        for process in processes:
            process.start()
        roots = [p.pid for p in processes] + ([tree_pid] if tree_pid else [])
        with PeakMemory(lambda: roots) as memory:
            try:
                barrier.wait(timeout=SETUP_TIMEOUT_S)
            except threading.BrokenBarrierError:
                raise RuntimeError("a trainer failed to start:\n"
                                   f"{results.get(timeout=10)}") from None
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
    return {"trainers": trainer_results, "launched_at": launched_at,
            "cpu_at_start_s": cpu_at_start_s, "cpu_at_end_s": cpu_at_end_s,
            "machine_busy_s": float(busy_s), "machine_steal_s": float(steal_s),
            "peak_rss_mb": memory.peak_mb}


# -- measurements -----------------------------------------------------------------------------


def measure_peer(name: str, tasks: list[TaskSpec], plans: dict, args, gpu_s: float) -> dict:
    """Each task's batches from the peer's DataLoader over sandfs's plan of it; the cold clock
    starts when the trainer processes are launched."""
    jobs = [TrainerJob(task, args.epochs, gpu_s,
                       lambda task=task: PeerFeed(plans[task.name], PEERS[name], args.workers))
            for task in tasks]
    run = run_trainers(jobs)
    trainers = run["trainers"]
    cpu_s = sum(t["cpu_tree_s"] for t in trainers)
    figures = feed_figures(run, gpu_s, launched_at=run["launched_at"])
    return {**figures, **cpu_figures(cpu_s, figures),
            "cpu_loader_workers_s": round(cpu_s - sum(t["cpu_main_s"] for t in trainers), 2),
            "peak_rss_mb": run["peak_rss_mb"], **noise_figures(run, own_cpu_s=cpu_s)}


@dataclass(frozen=True, slots=True)
class SandfsPass:
    sandfs: dict  # the figures of the first (cold) pass
    ideal: dict  # an ideal feed's figures, from the sandfs pass (`ideal_record`)
    views: dict[str, dict[tuple[int, int], np.ndarray]]  # task -> (epoch, iteration) -> view


def measure_sandfs(tasks: list[TaskSpec], workdir: Path, args, gpu_s: float,
                   keep_views: list[tuple[int, int]], peers: list[str], plans: dict
                   ) -> SandfsPass:
    """The sandfs pass on a fresh mount (and from it, the ideal feed's figures); then the
    views `keep_views` of every task are read for the peers' check. The sandfs pass is
    charged the daemon's CPU from the moment it served (a scheduler may start before the first
    read: `head_start_s` says how long the readers took to start); `_cold` figures count from
    the launch of `sandfs mount`, its CPU included."""
    with sandfs_mount(workdir, [t.config_path for t in tasks], k_epochs=args.k_epochs,
                      workers=args.workers,
                      extra_args=["--decode-ahead", str(args.decode_ahead),
                                  "--execution", args.execution]) as mount:
        jobs = [TrainerJob(task, args.epochs, gpu_s,
                           lambda task=task: SandfsFeed(mount.mountpoint, task.name))
                for task in tasks]
        status_ready = mount.status()
        with sampled_gil(mount.pid, args) as sampler:
            cold = run_trainers(jobs, tree_pid=mount.pid)
        status_cold = mount.status()
        daemon_peak_mb = peak_rss_mb(mount.pid)
        workers_peak_mb = descendants_peak_rss_mb(mount.pid)  # job worker processes
        views = {task.name: {key: read_view(mount.mountpoint, task.name, *key)
                             for key in keep_views} for task in tasks}
        kept_s = first_batch_on_kept_mount(mount.mountpoint, tasks[0])
    sandfs = sandfs_record(cold, cold["cpu_at_end_s"] - mount.ready_cpu_s,
                           daemon_figures(status_ready, status_cold), gpu_s, mount.launched_at)
    readers_cpu_s = sandfs["cpu_readers_s"]
    sandfs["cpu_s_cold"] = round(cold["cpu_at_end_s"] + readers_cpu_s, 2)
    sandfs["cpu_s_per_batch_cold"] = round(sandfs["cpu_s_cold"] / sandfs["batches"], 4)
    sandfs["daemon_peak_rss_mb"] = daemon_peak_mb
    sandfs["workers_peak_rss_mb"] = workers_peak_mb
    sandfs["mount_s"] = round(mount.mount_s, 2)
    sandfs["first_batch_kept_mount_s"] = round(kept_s, 3)
    sandfs["head_start_s"] = round(min(t["started"] for t in cold["trainers"]) - mount.ready_at, 3)
    sandfs["cpu_daemon_head_start_s"] = round(cold["cpu_at_start_s"] - mount.ready_cpu_s, 2)
    if sampler is not None:  # from the mount serving to the last batch read
        sandfs |= sampler.profile.per_batch(sandfs["batches"],
                                            max(t["finished"] for t in cold["trainers"])
                                            - mount.ready_at)
    return SandfsPass(sandfs, ideal_record(cold, gpu_s), views)


def sampled_gil(pid: int, args) -> contextlib.AbstractContextManager[GilSampler | None]:
    if not args.gil:
        return contextlib.nullcontext()
    raw = None
    if args.gil_raw is not None:
        args.gil_raw.mkdir(parents=True, exist_ok=True)
        raw = args.gil_raw / f"gil-{time.strftime('%H%M%S')}-{pid}.txt"
    return GilSampler(pid, args.gil_rate, keep_raw=raw)


def first_batch_on_kept_mount(mountpoint: Path, task: TaskSpec) -> float:
    """A mount kept up (a service) and a new training run: seconds from registering a task
    (this pipeline with another seed, so other clips to decode) to its first batch in hand, as
    a training script does it (`register_task`, then open and read)."""
    config = yaml.safe_load(task.config_path.read_text())
    config["seed"] = config.get("seed", 0) + 1
    started = time.monotonic()
    with register_task(mountpoint, config, name=f"{task.name}-kept"):
        read_view(mountpoint, f"{task.name}-kept", 0, 0)
        return time.monotonic() - started


def read_view(mountpoint: Path, task: str, epoch: int, iteration: int) -> np.ndarray:
    return np.load(mountpoint / task / str(epoch) / str(iteration) / "view")


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


def sandfs_record(run: dict, daemon_cpu_s: float, daemon: dict, gpu_s: float,
                  launched_at: float | None = None) -> dict:
    readers_cpu_s = sum(t["cpu_tree_s"] for t in run["trainers"])
    daemon_cpu_while_reading_s = run["cpu_at_end_s"] - run["cpu_at_start_s"]
    figures = feed_figures(run, gpu_s, launched_at)
    return {**figures, **cpu_figures(daemon_cpu_s + readers_cpu_s, figures),
            "cpu_daemon_s": round(daemon_cpu_s, 2),
            "cpu_readers_s": round(readers_cpu_s, 2), "peak_rss_mb": run["peak_rss_mb"],
            **daemon,
            **noise_figures(run, own_cpu_s=daemon_cpu_while_reading_s + readers_cpu_s)}


def ideal_record(run: dict, gpu_s: float) -> dict:
    """An ideal feed, from the sandfs pass: each reader takes every batch as fast as it took
    those that were ready when it opened them (the median of their waits: the read through
    FUSE, under the same load), and keeps its own time per batch (checks, the GPU step). Its
    batches/s summed over readers, its GPU-busy share averaged."""
    trainers = run["trainers"]
    ready = [w for t in trainers for w, r in zip(t["waits_s"], t["ready_at_open"], strict=True)
             if r]
    if not ready:
        return {"batches_per_s": None, "gpu_busy": None, "gpu_busy_steady": None,
                "ready_views": 0, "wait_ms_ready": None}
    wait_s = statistics.median(ready)
    per_batch_s = [wait_s + own_time_per_batch(t) for t in trainers]
    figures = {"batches_per_s": round(sum(1 / s for s in per_batch_s), 3),
               "ready_views": len(ready), "wait_ms_ready": round(wait_s * 1e3, 2)}
    if gpu_s:
        busy = statistics.mean(gpu_s / s for s in per_batch_s)
        figures |= {"gpu_busy": round(busy, 3), "gpu_busy_steady": round(busy, 3)}
    return figures


def own_time_per_batch(trainer: dict) -> float:
    """A reader's time per batch outside its waits for data (its GPU step included)."""
    waits = trainer["waits_s"]
    return (trainer["finished"] - trainer["started"] - sum(waits)) / len(waits)


def cpu_figures(cpu_s: float, figures: dict) -> dict:
    """The feed's CPU seconds, per batch, and the cores it kept busy on average (of
    os.cpu_count()) from the first read on."""
    return {"cpu_s": round(cpu_s, 2), "cpu_s_per_batch": round(cpu_s / figures["batches"], 4),
            "cores_used": round(cpu_s / figures["wall_s"], 2)}


def noise_figures(run: dict, own_cpu_s: float) -> dict:
    """CPU seconds that others used during the run: processes outside this measurement (e.g.
    tests running beside it) and other guests of the hypervisor (steal)."""
    return {"cpu_others_s": round(max(0.0, run["machine_busy_s"] - own_cpu_s), 2),
            "cpu_steal_s": round(run["machine_steal_s"], 2)}


def feed_figures(run: dict, gpu_s: float, launched_at: float | None = None) -> dict:
    """Throughput over all tasks (batches / wall, wall from the first read to the last batch;
    with `launched_at`, also from then: `_cold`), the per-batch data wait, waits at epoch
    starts and, with a GPU step, the GPU-busy share."""
    trainers = run["trainers"]
    finished = max(t["finished"] for t in trainers)
    wall_s = finished - min(t["started"] for t in trainers)
    batches = sum(len(t["waits_s"]) for t in trainers)
    clips = sum(t["clips"] for t in trainers)
    waits_ms = [w * 1e3 for t in trainers for w in t["waits_s"]]
    first_batch = min(t["started"] + t["waits_s"][0] for t in trainers)
    cold = {} if launched_at is None else {
        "wall_cold_s": round(finished - launched_at, 3),
        "batches_per_s_cold": round(batches / (finished - launched_at), 3),
        "first_batch_cold_s": round(first_batch - launched_at, 3)}
    figures = {"wall_s": round(wall_s, 3), "batches": batches,
               "first_batch_s": round(first_batch - min(t["started"] for t in trainers), 3),
               "batches_per_s": round(batches / wall_s, 3), **cold,
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


@dataclass(frozen=True, slots=True)
class Dataset:
    root: Path
    name: str
    extensions: list[str]


def run_scenario(scenario: str, dataset: Dataset, workdir: Path, args, peers: list[str],
                 params: dict) -> None:
    config_dir = workdir / f"configs-{scenario}"
    config_dir.mkdir()
    tasks = write_task_configs(scenario, dataset.root, dataset.extensions, args.epochs,
                               config_dir, args.seed)
    plans = task_plans([t.config_path for t in tasks], args.k_epochs, args.workers)
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    checks_ok: dict[str, bool] = {}
    peers = list(peers)  # a peer that fails leaves the rest of the scenario
    for repeat in range(args.repeats):
        for mode in args.modes:
            gpu_s = args.gpu_ms / 1e3 if mode == "gpu" else 0.0
            keep = check_batches(plans, args.epochs) if not checks_ok and peers else []
            done = measure_repeat(tasks, plans, peers, workdir, args, gpu_s,
                                  reverse=bool(repeat % 2), keep_views=keep)
            for system, figures in done.measured.items():
                emit({"record": "run", "scenario": scenario, "mode": mode, "repeat": repeat,
                      "system": system, **figures})
            for peer, error in done.failed.items():
                emit({"record": "error", "scenario": scenario, "mode": mode, "repeat": repeat,
                      "peer": peer, "error": error})
                peers.remove(peer)
            runs[mode].append(done.measured)
            for check in check_in_child(plans, peers, done.views, keep) if keep else ():
                emit({"record": "check", "scenario": scenario, **check})
                checks_ok[check["peer"]] = checks_ok.get(check["peer"], True) and check["ok"]
    for mode, measured in runs.items():
        emit(summary_record(scenario, mode, measured, tasks, peers, checks_ok,
                            {**params, "dataset": dataset.name}))


@dataclass(frozen=True, slots=True)
class Repeat:
    measured: dict[str, dict]  # system -> figures
    views: dict  # the views kept for the check (SandfsPass.views)
    failed: dict[str, str]  # peer -> why its pass failed


def measure_repeat(tasks, plans, peers, workdir, args, gpu_s, *, reverse: bool,
                   keep_views: list[tuple[int, int]]) -> Repeat:
    """Every peer and sandfs back to back, in reversed order in odd repeats. A peer
    whose pass fails (its decoder on some file) is reported, not measured; sandfs failing
    stops the run."""
    measured, views, failed = {}, {}, {}
    steps = [*peers, "sandfs"]
    for step in reversed(steps) if reverse else steps:
        settle_disk()
        if step == "sandfs":
            done = measure_sandfs(tasks, workdir, args, gpu_s, keep_views, peers, plans)
            measured["sandfs"], measured["ideal"], views = done.sandfs, done.ideal, done.views
            continue
        try:
            measured[step] = measure_peer(step, tasks, plans, args, gpu_s)
        except RuntimeError as exc:
            failed[step] = str(exc)
    return Repeat(measured, views, failed)


def check_batches(plans: dict, epochs: int) -> list[tuple[int, int]]:
    """The first batches of epoch 0 and of the last epoch (another window when epochs > k)."""
    iterations = min(plan.iterations_per_epoch for plan in plans.values())
    keys = [(epoch, i) for epoch in (0, epochs - 1) for i in range(min(CHECK_BATCHES, iterations))]
    return list(dict.fromkeys(keys))


def check_in_child(plans: dict, peers: list[str], views: dict,
                   keys: list[tuple[int, int]]) -> list[dict]:
    """Every peer's batches `keys` against the views the mount served, decoded in a forked
    child, so that this process never starts a decoder's threads before forking trainers."""
    def check_all() -> None:
        try:
            checks = [check_peer(PEERS[peer], plan,
                                 lambda e, i, task=task: views[task][(e, i)], keys)
                      for peer in peers for task, plan in plans.items()]
        except BaseException:
            results.put(traceback.format_exc())
            return
        results.put([{"peer": c.peer, "task": c.task, "ok": c.ok, "batches": c.batches,
                      "max_abs_diff": c.max_abs_diff, "mean_abs_diff": c.mean_abs_diff,
                      "tolerance": {"max_abs": c.tolerance.max_abs,
                                    "mean_abs": c.tolerance.mean_abs},
                      "problems": list(c.problems)} for c in checks])

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=check_all, name="peer-check")
    child.start()
    try:
        checks = results.get(timeout=RUN_TIMEOUT_S)
        if isinstance(checks, str):
            raise RuntimeError(f"the peers' check failed:\n{checks}")
        return checks
    finally:
        child.join(timeout=60)
        if child.is_alive():
            kill_tree(child.pid)
            child.join()


COMMON_KEYS = ("batches_per_s", "clips_per_s", "wall_s", "first_batch_s", "gpu_busy",
               "gpu_busy_steady", "cpu_s", "cpu_s_per_batch", "cores_used", "peak_rss_mb",
               "cpu_others_s", "cpu_steal_s")
IDEAL_KEYS = ("batches_per_s", "gpu_busy", "gpu_busy_steady", "ready_views", "wait_ms_ready")
COLD_KEYS = ("batches_per_s_cold", "wall_cold_s", "first_batch_cold_s")
PEER_KEYS = (*COMMON_KEYS, *COLD_KEYS, "cpu_loader_workers_s")
SANDFS_KEYS = (*COMMON_KEYS, *COLD_KEYS, "cpu_s_cold", "cpu_s_per_batch_cold",
               "daemon_peak_rss_mb", "workers_peak_rss_mb", "cpu_daemon_s", "stall_s_total",
               "frames_decoded",
               "frames_decoded_independent", "views_materialized", "mount_s", "head_start_s",
               "first_batch_kept_mount_s", "gil_ms_per_batch", "gil_ms_per_batch_loop",
               "gil_ms_per_batch_threads", "gil_cpu_ms_per_batch", "gil_cpu_ms_per_batch_loop",
               "gil_cpu_ms_per_batch_threads", "gil_ceiling_batches_per_s", "gil_held_share")


def summary_record(scenario: str, mode: str, measured: list[dict], tasks, peers: list[str],
                   checks_ok: dict[str, bool], params: dict) -> dict:
    """Medians over the repeats; each ratio is taken within one repeat, then the median. The
    best peer is the one with the most batches/s in that repeat (by the cold figure for the
    `_cold` ratio)."""
    peers = [peer for peer in peers if all(peer in m for m in measured)]
    record = {"record": "summary", "scenario": scenario, "mode": mode,
              "tasks": [t.name for t in tasks], "repeats": len(measured),
              "peer_check_ok": checks_ok}
    keys = {**dict.fromkeys(peers, PEER_KEYS), "sandfs": SANDFS_KEYS}
    for system, wanted in keys.items():
        runs = [m[system] for m in measured]
        record[system] = {key: median_or_none([run.get(key) for run in runs]) for key in wanted}
        record[system]["wait_ms_p90"] = median_or_none([run["wait_ms"]["p90"] for run in runs], 1)
        record[system]["epoch_start_wait_ms"] = [
            median_or_none(waits, 1) for waits in zip(*(run["epoch_start_wait_ms"] for run in runs),
                                                      strict=True)]
    record["ideal"] = {key: median_or_none([m["ideal"].get(key) for m in measured])
                       for key in IDEAL_KEYS}
    if peers:
        record |= best_peer_ratios(measured, peers)
    record["ratio_sandfs_over_ideal"] = median_or_none(
        [m["sandfs"]["batches_per_s"] / m["ideal"]["batches_per_s"] for m in measured
         if m["ideal"]["batches_per_s"]])
    if mode == "gpu":  # the "within 15% of ideal in steady state" target
        record["ratio_sandfs_over_ideal_steady"] = median_or_none(
            [m["sandfs"]["gpu_busy_steady"] / m["ideal"]["gpu_busy_steady"] for m in measured
             if m["ideal"]["gpu_busy_steady"]])
    return {**record, "params": params}


def best_peer_ratios(measured: list[dict], peers: list[str]) -> dict:
    record = {}
    for suffix in ("", "_cold"):
        key = f"batches_per_s{suffix}"
        best = [max(peers, key=lambda peer, m=m: m[peer][key]) for m in measured]
        record[f"best_peer{suffix}"] = best
        record[f"ratio_sandfs_over_best_peer{suffix}"] = median_or_none(
            [m["sandfs"][key] / m[peer][key] for m, peer in zip(measured, best, strict=True)])
    first = [min(m[peer]["first_batch_cold_s"] for peer in peers) for m in measured]
    record["first_batch_cold_s_best_peer"] = median_or_none(first)
    record["ratio_first_batch_sandfs_over_best_peer"] = median_or_none(
        [m["sandfs"]["first_batch_cold_s"] / f for m, f in zip(measured, first, strict=True)])
    record["ratio_first_batch_kept_mount_over_best_peer"] = median_or_none(
        [m["sandfs"]["first_batch_kept_mount_s"] / f for m, f in zip(measured, first, strict=True)])
    record["ratio_sandfs_over_peer"] = {
        peer: median_or_none([m["sandfs"]["batches_per_s"] / m[peer]["batches_per_s"]
                              for m in measured]) for peer in peers}
    return record


def make_datasets(args, scenarios: list[str]) -> dict[str, Dataset]:
    """Each scenario's dataset, generated on first use: the mixed-codec set, or the
    Kinetics-like H.264 one (`--bframes`)."""
    made: dict[str, Dataset] = {}
    for scenario in scenarios:
        per_class = args.videos // CLASSES
        if scenario in MIXED_SCENARIOS:
            spec = MixedDatasetSpec(CLASSES, per_class)
        elif scenario in KINETICS_SCENARIOS:
            spec = MixedDatasetSpec(CLASSES, per_class, KINETICS_KINDS, seconds=(10, 10),
                                    tag="kinetics")
        elif scenario in SHORT_SCENARIOS:
            spec = DatasetSpec(CLASSES, per_class, width=160, height=120, seconds=(3, 3),
                               bframes=args.bframes)
        else:
            spec = DatasetSpec(CLASSES, per_class, bframes=args.bframes)
        if spec.name not in made:
            made[spec.name] = Dataset(ensure_dataset(args.data_dir, spec), spec.name,
                                      spec.extensions)
        made[scenario] = made[spec.name]
    return {scenario: made[scenario] for scenario in scenarios}


def raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    args = parse_args()
    # Ctrl-C and SIGTERM (even as a background job, where SIGINT starts ignored) raise
    # KeyboardInterrupt, so the finally blocks unmount and stop every process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    compile_sandfs()
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    datasets = make_datasets(args, scenarios)
    peers, skipped = [], {}
    for name in args.peers:
        reason = peer_unavailable(name)
        if reason:
            skipped[name] = reason
        else:
            peers.append(name)
    params = {"quick": args.quick, "videos": args.videos, "epochs": args.epochs,
              "repeats": args.repeats, "gpu_ms": args.gpu_ms, "k_epochs": args.k_epochs,
              "decode_ahead": args.decode_ahead, "workers": args.workers,
              "execution": args.execution,
              "gil_rate_hz": args.gil_rate if args.gil else None,
              "modes": args.modes, "peers": peers}
    busy_cores = machine_busy_cores()
    if busy_cores > BUSY_MACHINE_CORES:
        print(f"warning: other processes keep {busy_cores} cores busy: expect noisy figures "
              "(see cpu_others_s)", file=sys.stderr)
    emit({"record": "params", "bench": "e2e", **params,
          "datasets": {s: str(d.root) for s, d in datasets.items()},
          "peer_versions": {name: peer_version(name) for name in peers},
          "machine": machine_info(), "busy_cores_before_start": busy_cores})
    for name, reason in skipped.items():
        print(f"warning: peer {name} skipped: {reason}", file=sys.stderr)
        emit({"record": "skip", "peer": name, "reason": reason})
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=args.work_dir))

    def run_all() -> None:
        for scenario in scenarios:
            run_scenario(scenario, datasets[scenario], workdir, args, peers, params)

    return run_guarded(args.work_dir, run_all)


if __name__ == "__main__":
    sys.exit(main())
