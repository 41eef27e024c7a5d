"""Dataset scale: what a mount costs as the dataset grows from 1,000 to 250,000 videos.

The dataset: --sources short H.264 videos (320x240, 3 s at 30 fps, a keyframe a second),
hard-linked to one path each, 1,000 to a folder (a folder is a class), so a large dataset costs
no disk. Two tasks, one at a time: `small` (configs/single.yaml: 8 clips of 16x112x112) and
`slowfast` (configs/slowfast.yaml: 8 clips of 32x112x112, stride 2), k = --k-epochs.

Per size and task:
- mount (through `sandfs mount`, a fresh cache dir, then a remount on the same cache dir, its
  scan index kept): seconds from the launch to `sandfs mount` returning and to the first batch
  in hand, cold and warm; epoch-0 batches/s over --batches batches read one after the other
  after the first (each batch's videos are decoded for their window: the same work at every
  size) and the CPU seconds of the daemon and its probe workers per batch; the daemon's peak
  RSS (VmHWM) and its process tree's sampled peak; the pruning the daemon logged by then; on
  the cold mount, when its scan was done (`scan_done_s`, seen after the batches: it waits for
  it, so the warm mount has its index; `scan_s`, the daemon's own figure) and, with
  --whole-timeout, when window 0 was planned whole (its rest swept once the scan is done),
  with the daemon's RSS then and its peak 5 s later (`whole_s`, `daemon_rss_whole_mb`,
  `daemon_peak_rss_whole_mb`: the timed batches need only the window's first parts), and its
  peak once the task's first two windows are planned (`planned_s`,
  `daemon_peak_rss_planned_mb`) and once both are pruned (`pruned_s`,
  `daemon_peak_rss_pruned_mb`: pruning runs after planning, and its transient is often the
  daemon's peak); on the warm mount, right after its first batch (with
  --join-when-planned: once it holds its first two windows planned, `kept_after_s` from the
  launch), seconds from a second task's file written into `.sand/tasks/` (another seed) to
  its first batch (`joined_first_batch_s`; `joined_at_s`: when it had it, from the launch),
  the first task reading on meanwhile (its longest read during the join and its median read
  before: `other_read_during_join_s`, `other_read_before_s`).
- scan (in this process): `scan_dataset` of the linked dataset with no scan index, two probe
  workers: wall seconds, videos/s, CPU milliseconds a video (this process and its workers).
- warm (through `sandfs mount`): a mount on a cache dir holding only a scan index of every
  file (written in this process from the sources' probes, no cold mount first): the launch to
  the first batch, a second task joining as above, peak RSS. Every mount also reports the
  daemon's CPU seconds up to its first batch (`first_batch_cpu_s`).
- cold (through `sandfs mount`): a fresh cache dir, the launch to the first batch and the
  daemon's CPU seconds by then, peak RSS; unmounted at once (no scan waited for).
- plan (in this process, on scan results copied from the sources' probes, no mount): planning
  seconds (CPU) of the tasks' plans and of window 0, plan bytes a clip (what tracemalloc sees
  the task plans, the window plan, its board and its window book hold, over the window's
  clips, and tracemalloc's peak while they are made: `plan_peak_bytes_per_clip`; and what
  `plan_window` of window 1 adds beside them, as a window planned only to carry frames for,
  held and at its peak: `future_window_bytes_per_clip`,
  `future_window_peak_bytes_per_clip`), this process's RSS before planning and
  holding the scan, the plans, window 0 whole, its book and board
  (`rss_before_mb`, `rss_window_mb`: what a daemon's plan costs it, without the FUSE side),
  and Algorithm 1's CPU seconds over window 0 with room for half its clips (skipped above
  --prune-max-clips).
One JSON object per line.

    .venv/bin/python benchmarks/bench_scale.py --sizes 1000 10000
    .venv/bin/python benchmarks/bench_scale.py --sizes 1000 --parts plan
    .venv/bin/python benchmarks/bench_scale.py --sizes 10000 --parts scan
    .venv/bin/python benchmarks/bench_scale.py --sizes 100000 250000 --tasks small --parts warm
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import inspect
import os
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    PeakMemory,
    compile_sandfs,
    emit,
    machine_info,
    peak_rss_mb,
    rss_mb,
    sandfs_mount,
    settle_disk,
    tree_cpu_seconds,
)

from sandfs.cache.store import ObjectStore
from sandfs.config.loader import load_task_config
from sandfs.media import scan_index
from sandfs.media.datasets import index_path
from sandfs.media.scan import scan_dataset
from sandfs.media.scan_index import save_index
from sandfs.media.synth import write_test_video
from sandfs.media.types import DatasetScan, MediaLimits, ProbeFacts, VideoInfo
from sandfs.media.walk import vetted_targets
from sandfs.plan.mount import dataset_key, plan_tasks
from sandfs.plan.window import plan_window
from sandfs.sched.board import BatchBoard
from sandfs.sched.objects import leaves_nbytes
from sandfs.sched.pruning import pruned_plans
from sandfs.sched.windows import WindowBook
from sandfs.sched.work import plan_active_window

CONFIGS = Path(__file__).resolve().parent / "configs"
TASKS = {"small": "single.yaml", "slowfast": "slowfast.yaml"}
FOLDER_VIDEOS = 1000
PLAN_BUDGET_BYTES = 10 << 30  # the store `plan` keeps window 0's soonest clips in
SOURCE_FRAMES, SOURCE_FPS, SOURCE_WH = 90, 30, (320, 240)
# seconds from the first two windows planned to a window's pruning logged, at most: at 250,000
# videos window 0's was logged 113 s after, 39 s of it pruning
PRUNE_START_S = 240
PRUNED_LINE = re.compile(r"window (\d+): keeping (\d+) bytes on disk \((\d+) collapses, "
                         r"(\d+) drops.*\) in ([\d.]+)s")
# status.json at 250,000 videos costs the daemon tens of ms (its status walks the pending
# jobs and the store's index): polled every 0.5 s it was a third of the daemon's Python time
STATUS_POLL_S = 2.0
SCANNED_LINE = re.compile(r"scanned .*, ([\d.]+) s$", re.MULTILINE)  # the daemon's own figure


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--parts", nargs="+",
                        choices=("mount", "plan", "scan", "warm", "cold"),
                        default=["mount", "plan"])
    parser.add_argument("--batches", type=int, default=120,
                        help="epoch-0 batches timed after the first (default 120)")
    parser.add_argument("--k-epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-join", dest="join", action="store_false",
                        help="no task joins the warm mount (its windows take minutes to plan "
                             "at 250,000 videos): its batches are timed instead")
    parser.add_argument("--join-when-planned", action="store_true",
                        help="the task joins the warm mount once its first two windows are "
                             "planned (minutes at 100,000 videos), not right after its first "
                             "batch")
    parser.add_argument("--whole-timeout", type=float, default=0,
                        help="after the cold mount's scan, wait up to this many seconds for "
                             "window 0 to be planned whole, then for its first two windows, "
                             "and report the daemon's RSS then (0: not waited)")
    parser.add_argument("--plan-ahead", type=int, default=None,
                        help="the mount runs' engine.plan_ahead (default: the config's, 64)")
    parser.add_argument("--sources", type=int, default=16, help="distinct videos linked")
    parser.add_argument("--prune-max-clips", type=int, default=300_000,
                        help="skip the in-process pruning figure above this many clips")
    parser.add_argument("--work-dir", type=Path,
                        help="where datasets, caches and logs go (default: a temporary dir)")
    args = parser.parse_args()
    if min(args.sizes) < 1 or args.batches < 1 or args.sources < 1:
        parser.error("--sizes, --batches and --sources must be >= 1")
    return args


# -- the dataset ------------------------------------------------------------------------------


def write_sources(root: Path, count: int) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = root / f"source_{i:03d}.mp4"
        if not path.exists():
            write_test_video(path, num_frames=SOURCE_FRAMES, width=SOURCE_WH[0],
                             height=SOURCE_WH[1], fps=SOURCE_FPS, gop=SOURCE_FPS, noise=True,
                             seed=i)
        paths.append(path)
    return paths


def link_dataset(root: Path, sources: list[Path], videos: int) -> Path:
    """`videos` hard links to the sources, 1,000 to a folder; made once per size."""
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i in range(videos):
        folder = root / f"c{i // FOLDER_VIDEOS:03d}"
        if i % FOLDER_VIDEOS == 0:
            folder.mkdir(parents=True)
        (folder / f"v{i:06d}.mp4").hardlink_to(sources[i % len(sources)])
    done.touch()
    return root


def task_config(task: str, root: Path, work_dir: Path, plan_ahead: int | None = None) -> Path:
    config = yaml.safe_load((CONFIGS / TASKS[task]).read_text())
    config["task"] = task
    if plan_ahead is not None:  # a large window planned this many batches ahead of a reader
        config.setdefault("engine", {})["plan_ahead"] = plan_ahead
    config["dataset"]["video_dataset_path"] = str(root)
    path = work_dir / f"{task}-{root.name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# -- through the mount ------------------------------------------------------------------------


def read_batch(mountpoint: Path, task: str, iteration: int) -> np.ndarray:
    return np.load(mountpoint / task / "0" / str(iteration) / "view")


def pruning_logged(log_path: Path, since: int) -> list[dict]:
    text = log_path.read_text(errors="replace")[since:]
    return [{"window": int(w), "kept_bytes": int(b), "collapses": int(c), "drops": int(d),
             "seconds": float(s)} for w, b, c, d, s in PRUNED_LINE.findall(text)]


def mounted_run(work_dir: Path, config: Path, task: str, args, *, warm: bool) -> dict:
    """One mount: the launch to serving and to the first batch; when cold, epoch-0 batches/s
    and the peak memory too."""
    log_path = work_dir / "mnt.log"
    since = log_path.stat().st_size if log_path.exists() else 0
    settle_disk()
    pid = [0]
    with PeakMemory(lambda: [pid[0]] if pid[0] else []) as tree, \
            sandfs_mount(work_dir, [config], k_epochs=args.k_epochs, workers=args.workers,
                         keep_cache=True) as mount:  # the cold mount's for the warm one
        pid[0] = mount.pid
        first = read_batch(mount.mountpoint, task, 0)
        record = {"mount_s": round(mount.mount_s, 2),
                  "first_batch_s": round(time.monotonic() - mount.launched_at, 2),
                  "first_batch_cpu_s": round(tree_cpu_seconds(mount.pid), 2),  # the daemon's
                  "batch_shape": list(first.shape)}
        if warm and args.join:  # another task joins the kept mount, at once (its windows
            # still planned in parts) or, with --join-when-planned, once they are planned;
            # with --no-join the warm mount's batches are timed as the cold one's
            if args.join_when_planned:
                record["kept_after_s"] = windows_planned_s(mount, config, task, args.k_epochs)
            record.update(joined_record(mount.mountpoint, config, task))
            record["joined_at_s"] = round(time.monotonic() - mount.launched_at, 2)
            record["daemon_peak_rss_mb"] = peak_rss_mb(mount.pid)
        else:
            iterations = mount.status()["tasks"][task]["iterations_per_epoch"]
            count = min(args.batches, iterations - 1)
            started, cpu = time.monotonic(), tree_cpu_seconds(mount.pid)
            for iteration in range(1, count + 1):
                read_batch(mount.mountpoint, task, iteration)
            seconds, cpu = time.monotonic() - started, tree_cpu_seconds(mount.pid) - cpu
            record.update(batches=count, batches_per_s=round(count / seconds, 2),
                          cpu_s_per_batch=round(cpu / count, 3),  # the daemon and its workers
                          daemon_peak_rss_mb=peak_rss_mb(mount.pid))
            if not warm:  # its scan index, kept for the warm mount, is written at the end
                record["scan_done_s"] = scan_done_s(mount)
                record["scan_s"] = scan_logged_s(log_path, since)
                if args.whole_timeout:
                    record.update(whole_record(mount, config, task, args))
                    record.update(pruned_record(mount, log_path, since, record, args))
        record["pruning"] = pruning_logged(log_path, since)
    if not warm:
        record["tree_peak_rss_mb"] = tree.peak_mb
    return record


def whole_record(mount, config: Path, task: str, args, settle_s: float = 5.0) -> dict:
    """Once window 0 is planned whole (its parts planned as readers come, the rest swept
    while no reader waits): seconds from the launch (`whole_s`, None if not within
    --whole-timeout), the daemon's RSS then (`daemon_rss_whole_mb`) and its peak by then
    and `settle_s` later (`daemon_peak_rss_whole_mb`, what a whole window costs beyond the
    parts the timed batches needed); then, once the task's first two windows are planned (the
    next one is planned once the first is whole), the daemon's peak and RSS by then
    (`planned_s`, `daemon_peak_rss_planned_mb`, `daemon_rss_planned_mb`)."""
    give_up = time.monotonic() + args.whole_timeout
    record = {"whole_s": None}
    while time.monotonic() < give_up:
        if 0 not in mount.status()["scheduler"]["windows_in_parts"]:
            record.update(whole_s=round(time.monotonic() - mount.launched_at, 2),
                          daemon_rss_whole_mb=round(rss_mb(mount.pid), 1))
            time.sleep(settle_s)
            break
        time.sleep(STATUS_POLL_S)
    record["daemon_peak_rss_whole_mb"] = peak_rss_mb(mount.pid)
    if record["whole_s"] is not None:
        planned = windows_planned_s(mount, config, task, args.k_epochs, args.whole_timeout,
                                    read=args.batches + 1)
        record.update(planned_s=planned, daemon_peak_rss_planned_mb=peak_rss_mb(mount.pid),
                      daemon_rss_planned_mb=round(rss_mb(mount.pid), 1))
    return record


def pruned_record(mount, log_path: Path, since: int, record: dict, args) -> dict:
    """Once the first two windows are planned, when the daemon logged both pruned (pruning
    runs after planning, in a thread, beside the windows it prunes: the daemon's peak so far
    is often pruning's): seconds from the launch (`pruned_s`, None if not within
    --whole-timeout) and the daemon's peak and RSS by then (`daemon_peak_rss_pruned_mb`,
    `daemon_rss_pruned_mb`). Windows whose clips fit on disk log no pruning: None once
    PRUNE_START_S pass without a window pruned."""
    if record.get("planned_s") is None:
        return {}
    started, found = time.monotonic(), None
    while time.monotonic() < started + args.whole_timeout:
        pruned = {p["window"] for p in pruning_logged(log_path, since)}
        if {0, 1} <= pruned:
            found = round(time.monotonic() - mount.launched_at, 2)
            break
        if not pruned and time.monotonic() > started + PRUNE_START_S:
            break
        time.sleep(STATUS_POLL_S)
    return {"pruned_s": found, "daemon_peak_rss_pruned_mb": peak_rss_mb(mount.pid),
            "daemon_rss_pruned_mb": round(rss_mb(mount.pid), 1)}


def scan_done_s(mount, timeout_s: float = 900) -> float | None:
    """Seconds from the launch until the mount's scan is done, its index written (None: not
    within `timeout_s`)."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        scan = mount.status()["scan"]
        if scan["videos_total"] is not None and scan["videos_scanned"] >= scan["videos_total"]:
            return round(time.monotonic() - mount.launched_at, 2)
        time.sleep(0.5)
    return None


def scan_logged_s(log_path: Path, since: int) -> float | None:
    """The scan's seconds from its listing to its index written, as the daemon logged them
    (`scan_done_s` is when this process saw it done, after the timed batches)."""
    found = SCANNED_LINE.findall(log_path.read_text(errors="replace")[since:])
    return float(found[-1]) if found else None


def windows_planned_s(mount, config: Path, task: str, k_epochs: int,
                      timeout_s: float = 900, read: int = 1) -> float | None:
    """Seconds from the launch until the mount holds every batch of its first two windows
    planned or made, but the `read` ones (None: not within `timeout_s`)."""
    epochs = min(int(yaml.safe_load(config.read_text())["epochs"]), 2 * k_epochs)
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        status = mount.status()
        scheduler = status["scheduler"]
        wanted = epochs * status["tasks"][task]["iterations_per_epoch"] - read
        if scheduler["views_planned"] + scheduler["views_ready"] >= wanted:
            return round(time.monotonic() - mount.launched_at, 2)
        time.sleep(STATUS_POLL_S)
    return None


def joined_record(mountpoint: Path, config: Path, task: str) -> dict:
    """Seconds from writing a task file of the same pipeline with another seed into
    `.sand/tasks/` to its first batch in hand (`joined_first_batch_s`), while `task` reads
    its next batches one after the other from 1 s before: the longest of its reads during
    the join (`other_read_during_join_s`, a read that overlaps it) and the median of those
    before (`other_read_before_s`)."""
    joined = yaml.safe_load(config.read_text())
    joined.update(task="joined", seed=int(joined.get("seed", 0)) + 1)
    reads: list[tuple[float, float]] = []  # (start, seconds) of the other task's reads
    failed: list[BaseException] = []  # a read that raised: no figure of the reads during it
    stop = threading.Event()

    def read_on() -> None:
        iteration = 1
        try:
            while not stop.is_set():
                started = time.monotonic()
                read_batch(mountpoint, task, iteration)
                reads.append((started, time.monotonic() - started))
                iteration += 1
        except BaseException as error:
            failed.append(error)

    reader = threading.Thread(target=read_on)
    reader.start()
    try:
        time.sleep(1.0)
        started = time.monotonic()
        (mountpoint / ".sand" / "tasks" / "joined.yaml").write_text(
            yaml.safe_dump(joined, sort_keys=False))
        read_batch(mountpoint, "joined", 0)
        done = time.monotonic()
    finally:
        stop.set()
        reader.join()
    if failed:
        raise RuntimeError(f"{task}'s read {len(reads) + 1} failed during the join") from failed[0]
    during = [s for at, s in reads if at < done and at + s > started]
    before = [s for at, s in reads if at + s <= started]
    return {"joined_first_batch_s": round(done - started, 2),
            "other_read_during_join_s": round(max(during, default=0.0), 2),
            "other_read_before_s": round(float(np.median(before)), 2) if before else None}


def mount_record(work_dir: Path, root: Path, task: str, videos: int, args) -> dict:
    config = task_config(task, root, work_dir, args.plan_ahead)
    shutil.rmtree(work_dir / "mnt-cache", ignore_errors=True)
    cold = mounted_run(work_dir, config, task, args, warm=False)
    warm = mounted_run(work_dir, config, task, args, warm=True)
    shutil.rmtree(work_dir / "mnt-cache", ignore_errors=True)
    return {"record": "mount", "videos": videos, "task": task, "cold": cold, "warm": warm}


def warm_record(work_dir: Path, root: Path, infos: list[VideoInfo], task: str, videos: int,
                args) -> dict:
    """A warm mount whose cache dir holds only the scan index of every file."""
    config = task_config(task, root, work_dir)
    cache = work_dir / "mnt-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    limits = MediaLimits.from_env()
    facts = {info.identity: ProbeFacts(**{f: getattr(info, f) for f in FACTS}) for info in infos}
    found = vetted_targets(str(root.resolve()), [".mp4"], limits)
    listed = found[0]
    walked = {"walked": found[2]} if len(found) > 2 else {}  # an older tree's: no record
    row = getattr(scan_index, "IndexKey", None)  # an older tree's rows (A B B A against it)
    device = () if row else (root.stat().st_dev,)  # whose save_index takes no device
    rooted = ["root"] if "root" in inspect.signature(save_index).parameters else []
    save_index(index_path(str(cache), dataset_key(load_task_config(config))), limits,
               *[str(root.resolve()) for _ in rooted], {  # an older tree's takes no root
                   t.rel_path: (t if row is None else row(t.path, t.size_bytes, t.mtime_ns),
                                facts[t.identity]) for t in listed}, *device,
               **walked)
    warm = mounted_run(work_dir, config, task, args, warm=True)
    shutil.rmtree(cache, ignore_errors=True)
    return {"record": "warm", "videos": videos, "task": task, "warm": warm}


FACTS = [f for f in ProbeFacts.__dataclass_fields__ if f != "counted_by"]


def cold_record(work_dir: Path, root: Path, task: str, videos: int, args) -> dict:
    """A mount on a fresh cache dir, to its first batch."""
    config = task_config(task, root, work_dir)
    with sandfs_mount(work_dir, [config], k_epochs=args.k_epochs, workers=args.workers) as mount:
        read_batch(mount.mountpoint, task, 0)
        cold = {"mount_s": round(mount.mount_s, 2),
                "first_batch_s": round(time.monotonic() - mount.launched_at, 2),
                "first_batch_cpu_s": round(tree_cpu_seconds(mount.pid), 2),
                "daemon_peak_rss_mb": peak_rss_mb(mount.pid)}
    return {"record": "cold", "videos": videos, "task": task, "cold": cold}


# -- in this process --------------------------------------------------------------------------


def cpu_seconds() -> float:
    """This process's and its waited-for children's (the probe workers')."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def scan_record(root: Path, videos: int, args) -> dict:
    wall, cpu = time.monotonic(), cpu_seconds()
    scan = scan_dataset(root, [".mp4"], workers=args.workers)
    wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
    assert len(scan.videos) == videos and not scan.bad, scan.bad[:3]
    return {"record": "scan", "videos": videos, "workers": args.workers, "scan_s": round(wall, 2),
            "videos_per_s": round(videos / wall), "cpu_ms_per_video": round(cpu / videos * 1e3, 3)}


def source_infos(sources: list[Path], args) -> list[VideoInfo]:
    scan = scan_dataset(sources[0].parent, [".mp4"], workers=args.workers)
    assert len(scan.videos) == len(sources) and not scan.bad, scan.bad
    return sorted(scan.videos, key=lambda v: v.rel_path)


def copied_scan(root: Path, infos: list[VideoInfo], videos: int) -> DatasetScan:
    """The scan a mount of the linked dataset gets, without probing it again."""
    copies = []
    for i in range(videos):
        rel = f"c{i // FOLDER_VIDEOS:03d}/v{i:06d}"
        copies.append(dataclasses.replace(infos[i % len(infos)], name=rel,
                                          rel_path=f"{rel}.mp4", path=f"{root}/{rel}.mp4"))
    return DatasetScan(str(root), tuple(copies), ())


def plan_window0(config: Path, scan: DatasetScan, k_epochs: int, store: ObjectStore) -> dict:
    """Window 0 as a cold mount plans it (`plan_active_window`: its plan, then what to keep on
    disk and its jobs) and adds it to a board and a window book; the CPU seconds of each
    piece."""
    cfg = load_task_config(config)
    scans = {(cfg.dataset.video_dataset_path, cfg.dataset.extensions): scan}
    cpu, held = time.process_time(), {}
    held["plans"] = plans = plan_tasks([cfg], scans, k_epochs=k_epochs)
    held["tasks_s"], cpu = time.process_time() - cpu, time.process_time()
    held["planned"] = planned = plan_active_window(plans, 0, store, "algorithm1",
                                                   settle=True)  # as the daemon plans it
    held["active_s"], cpu = time.process_time() - cpu, time.process_time()
    held["board"] = board = BatchBoard()
    board.add_window(planned)
    held["book"] = book = WindowBook(plans)  # the daemon holds the window in its book too
    book.add_window(planned.plan)
    held["board_s"] = time.process_time() - cpu
    held["rss_mb"] = rss_mb(os.getpid())  # the scan, the plans, window 0 whole, book, board
    held["peak_bytes"] = tracemalloc.get_traced_memory()[1]  # 0 unless traced
    fresh = plan_tasks([cfg], scans, k_epochs=k_epochs)  # their views and draws not cached
    cpu = time.process_time()
    held["window"] = plan_window(fresh, 0)
    held["window_s"] = time.process_time() - cpu
    return held


def plan_record(work_dir: Path, root: Path, infos: list[VideoInfo], task: str, videos: int,
                args) -> dict:
    """`plan_window` alone (`window_cpu_s`), and the whole: the task plans, the window with
    its disk plans and jobs (`active_cpu_s`, `plan_window` again in it) and the board
    (`board_cpu_s`, the window book's add with it); bytes as tracemalloc sees the whole hold
    (numpy's arrays too)."""
    config = task_config(task, root, work_dir)
    scan = copied_scan(root, infos, videos)
    store = ObjectStore(str(work_dir / "plan-store"), PLAN_BUDGET_BYTES)
    gc.collect()
    before_mb = rss_mb(os.getpid())
    held = plan_window0(config, scan, args.k_epochs, store)
    clips = sum(len(work.uses) for work in held["window"].videos.values())
    times = {k: held[k] for k in ("tasks_s", "window_s", "active_s", "board_s", "rss_mb")}
    del held
    gc.unfreeze()  # settled: walked again, to be collected
    gc.collect()
    tracemalloc.start()
    held = plan_window0(config, scan, args.k_epochs, store)
    del held["window"]  # planned again, alone
    gc.collect()
    plan_bytes, peak_bytes = tracemalloc.get_traced_memory()[0], held["peak_bytes"]
    tracemalloc.reset_peak()
    future = plan_window(held["plans"], 1)  # as the daemon plans a window to carry for
    future_bytes, future_peak = (b - plan_bytes for b in tracemalloc.get_traced_memory())
    future_clips = sum(len(work.uses) for work in future.videos.values())
    del future
    tracemalloc.stop()
    del held
    gc.unfreeze()
    whole = times["tasks_s"] + times["active_s"] + times["board_s"]
    record = {"record": "plan", "videos": videos, "task": task, "window_clips": clips,
              "task_plans_cpu_s": round(times["tasks_s"], 3),
              "window_cpu_s": round(times["window_s"], 3),
              "window_us_per_clip": round(times["window_s"] / clips * 1e6, 2),
              "active_cpu_s": round(times["active_s"], 3),
              "board_cpu_s": round(times["board_s"], 3),
              "planning_us_per_clip": round(whole / clips * 1e6, 2),
              "plan_bytes_per_clip": round(plan_bytes / clips, 1),
              "plan_peak_bytes_per_clip": round(peak_bytes / clips, 1),
              "future_window_bytes_per_clip": round(future_bytes / max(future_clips, 1), 1),
              "future_window_peak_bytes_per_clip": round(future_peak / max(future_clips, 1), 1),
              "rss_before_mb": round(before_mb), "rss_window_mb": round(times["rss_mb"])}
    if clips <= args.prune_max_clips:
        window = plan_window0(config, scan, args.k_epochs, store)["window"]
        room = leaves_nbytes(window) // 2
        cpu = time.process_time()
        pruned_plans(window, room)
        record["prune_cpu_s"] = round(time.process_time() - cpu, 2)
    return record


@contextlib.contextmanager
def started(name: str, args) -> Iterator[tuple[Path, list[Path]]]:
    """A run's params line, its work dir (`--work-dir`, else a temporary one) and the source
    videos in it: the common start of this benchmark and `bench_prune.py`."""
    emit({"bench": name, "params": {**vars(args), "work_dir": str(args.work_dir)},
          "machine": machine_info()})
    compile_sandfs()
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as temp:
        work_dir = args.work_dir or Path(temp)
        work_dir.mkdir(parents=True, exist_ok=True)
        yield work_dir, write_sources(work_dir / "sources", args.sources)


def main() -> int:
    args = parse_args()
    with started("scale", args) as (work_dir, sources):
        infos = source_infos(sources, args) if {"plan", "warm"} & set(args.parts) else []
        for videos in sorted(args.sizes):
            root = link_dataset(work_dir / f"videos-{videos}", sources, videos)
            if "scan" in args.parts:
                emit(scan_record(root, videos, args))
            for task in args.tasks:
                if "plan" in args.parts:
                    emit(plan_record(work_dir, root, infos, task, videos, args))
                if "mount" in args.parts:
                    emit(mount_record(work_dir, root, task, videos, args))
                if "warm" in args.parts:
                    emit(warm_record(work_dir, root, infos, task, videos, args))
                if "cold" in args.parts:
                    emit(cold_record(work_dir, root, task, videos, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
