"""Helpers shared by the benchmarks: machine metadata, summaries, the synthetic dataset, CPU
seconds of a process tree, and a sandfs mount driven only through its command line."""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import select
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.helpers
from sandfs.launch import sandfs_argv
from tests.helpers.mountwatch import is_mounted, mounts_under

REPO_ROOT = Path(__file__).resolve().parent.parent
MOUNT_TIMEOUT_S = 120.0
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


# -- reporting --------------------------------------------------------------------------------


def machine_info() -> dict[str, object]:
    import av
    import numpy
    import torch

    return {"cores": os.cpu_count(), "cpu_model": cpu_model(), "git_sha": git_sha(),
            "python": platform.python_version(), "torch": torch.__version__,
            "av": av.__version__, "numpy": numpy.__version__, "machine": platform.machine(),
            "kernel": platform.release()}


def cpu_model() -> str | None:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def git_sha() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=REPO_ROOT)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=REPO_ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() + ("-dirty" if dirty else "")


def summary(values: Sequence[float], digits: int = 3) -> dict[str, float] | None:
    """median, p90 (nearest rank) and max of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), digits),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], digits),
            "max": round(ordered[-1], digits), "n": len(ordered)}


def median_or_none(values: Sequence[float | None], digits: int = 3) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), digits) if present else None


def fill_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  defaults: dict[str, dict], positive: Sequence[str]) -> None:
    """Options left unset take `defaults["quick"]` or `defaults["full"]` (by `args.quick`);
    each option named in `positive` must be at least 1."""
    for key, value in defaults["quick" if args.quick else "full"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in positive:
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


# -- the synthetic dataset --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """Kinetics-like videos: noisy texture, 25 fps, 8-10 s, keyframes 10 s apart; `bframes`
    B-frames between references in a fixed pattern (x264's b-adapt=0 with b-pyramid, as real
    encodes of real scenes have them; adaptive B-frames pick almost none on noise)."""

    classes: int
    videos_per_class: int
    width: int = 340
    height: int = 256
    fps: int = 25
    seconds: tuple[int, int] = (8, 10)
    gop_frames: int = 250
    bframes: int = 0

    @property
    def name(self) -> str:
        return (f"{self.classes}x{self.videos_per_class}-{self.width}x{self.height}"
                f"-{self.fps}fps-{self.seconds[0]}to{self.seconds[1]}s-gop{self.gop_frames}"
                + (f"-b{self.bframes}" if self.bframes else ""))

    @property
    def extensions(self) -> list[str]:
        return [".mp4"]

    def write(self, root: Path) -> None:
        from sandfs.media.synth import make_dataset

        make_dataset(root, classes=self.classes, videos_per_class=self.videos_per_class,
                     num_frames=(self.seconds[0] * self.fps, self.seconds[1] * self.fps),
                     size=(self.width, self.height), fps=self.fps, gop=self.gop_frames,
                     noise=True, bframes=self.bframes, b_adapt=not self.bframes)


@dataclass(frozen=True, slots=True)
class VideoKind:
    """One codec and frame size of a mixed dataset; B-frames in a fixed pattern; `fps` None:
    the dataset's."""

    codec: str
    ext: str
    width: int
    height: int
    bframes: int = 0
    fps: int | None = None


# What real training sets mix: H.264 with B-frames (the common case), VP9 (web video, no
# B-frames), MPEG-4 part 2 (old uploads), HEVC with B-frames; 256x144 to 640x360.
MIXED_KINDS = (VideoKind("libx264", ".mp4", 640, 360, bframes=3),
               VideoKind("libvpx-vp9", ".webm", 256, 144),
               VideoKind("mpeg4", ".mp4", 480, 270, bframes=2),
               VideoKind("libx265", ".mp4", 426, 240, bframes=3))
# Kinetics-400 as its users have it: 10 s clips re-encoded with x264's defaults (a keyframe every
# 250 frames, 3 B-frames), 25 or 30 fps, short side 256 (340x256, 456x256) up to 720p; a
# quarter of the videos 720p, whose decoding dominates.
KINETICS_KINDS = (VideoKind("libx264", ".mp4", 340, 256, bframes=3, fps=25),
                  VideoKind("libx264", ".mp4", 456, 256, bframes=3, fps=30),
                  VideoKind("libx264", ".mp4", 640, 360, bframes=3, fps=25),
                  VideoKind("libx264", ".mp4", 1280, 720, bframes=3, fps=30))


@dataclass(frozen=True, slots=True)
class MixedDatasetSpec:
    """Like DatasetSpec, video i of every class of kind `kinds[i % len(kinds)]`; `tag` names
    the mix."""

    classes: int
    videos_per_class: int
    kinds: tuple[VideoKind, ...] = MIXED_KINDS
    fps: int = 25
    seconds: tuple[int, int] = (8, 10)
    gop_frames: int = 250
    tag: str = "mixed"

    @property
    def name(self) -> str:
        codecs = "+".join(kind.codec.removeprefix("lib") for kind in self.kinds)
        return (f"{self.classes}x{self.videos_per_class}-{self.tag}-{codecs}-{self.fps}fps"
                f"-{self.seconds[0]}to{self.seconds[1]}s-gop{self.gop_frames}")

    @property
    def extensions(self) -> list[str]:
        return sorted({kind.ext for kind in self.kinds})

    def write(self, root: Path) -> None:
        import random

        from sandfs.media.synth import write_test_video

        rng = random.Random(0)
        for label in range(self.classes):
            folder = root / f"class{label:02d}"
            folder.mkdir(parents=True)
            for i in range(self.videos_per_class):
                kind = self.kinds[(label + i) % len(self.kinds)]
                fps = kind.fps or self.fps
                write_test_video(folder / f"class{label:02d}_{i:03d}{kind.ext}",
                                 num_frames=rng.randint(self.seconds[0] * fps,
                                                        self.seconds[1] * fps),
                                 width=kind.width, height=kind.height, fps=fps,
                                 codec=kind.codec, gop=self.gop_frames, bframes=kind.bframes,
                                 b_adapt=not kind.bframes, noise=True,
                                 seed=rng.randrange(1 << 30))


def compile_sandfs() -> None:
    """sandfs's modules as bytecode, as installing the package leaves them: where
    PYTHONDONTWRITEBYTECODE is set (this machine sets it) and nothing wrote them, every `sandfs
    mount` (and every peer's trainer, which imports sandfs.ops) compiles them again, 0.13 s."""
    compileall.compile_dir(REPO_ROOT / "sandfs", quiet=1)


def settle_disk() -> None:
    """Write out what earlier passes left dirty in the page cache, so that no pass pays for
    another's writeback: a 10-epoch sandfs pass leaves ~1.2 GB of cache files, and the
    kernel's flusher costs whichever pass runs next 10-40% of its speed
    (docs/performance.md#benchmark-pitfalls)."""
    os.sync()


def start_bench(name: str, args) -> Path:
    """The common start of a benchmark: its dataset (`args.videos`, `args.data_dir`) and a
    params line with the machine's metadata."""
    dataset = ensure_dataset(args.data_dir, DatasetSpec(4, args.videos // 4))
    emit({"bench": name, "params": vars(args) | {"data_dir": str(args.data_dir)},
          "machine": machine_info()})
    return dataset


def ensure_dataset(data_dir: Path, spec: DatasetSpec | MixedDatasetSpec) -> Path:
    """ROOT/CLASS/*.mp4 for `spec`, generated once (into a temp folder, then renamed)."""
    root = data_dir / spec.name
    if (root / "DONE").exists():
        return root
    partial = data_dir / f"{spec.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    spec.write(partial)
    (partial / "DONE").write_text(json.dumps({"seconds_to_generate": time.monotonic() - started}))
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return root


# -- CPU time ---------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds: utime + stime + cutime + cstime) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:  # fields 4 (ppid) and 14-17 (utime, stime, cutime, cstime)
            table[int(entry)] = (int(fields[1]),
                                 sum(int(v) for v in fields[11:15]) / CLOCK_TICKS_PER_S)
    return table


def _tree(root_pid: int, table: dict[int, tuple[int, float]]) -> set[int]:
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user + system, all threads) of `root_pid` and its live descendants, plus
    what their reaped children used: a delta of two readings is the tree's work in between."""
    table = _process_table()
    return sum(table[pid][1] for pid in _tree(root_pid, table) if pid in table)


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0  # gone meanwhile


def rss_mb(pid: int) -> float:
    """A live process's RSS now, MiB."""
    return _rss_bytes(pid) / 2**20


class PeakMemory:
    """The peak, over time, of the summed RSS of some process trees (a loader and its workers,
    a daemon and its readers), sampled every `interval_s` in a thread while the `with` block
    runs. Pages that forked workers share are counted once per process, as `ps` and most
    monitors count them."""

    def __init__(self, roots: Callable[[], Sequence[int]], interval_s: float = 0.25) -> None:
        self.roots, self.interval_s, self.peak_bytes = roots, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        table = _process_table()
        pids = set().union(*(_tree(root, table) for root in self.roots()))
        self.peak_bytes = max(self.peak_bytes, sum(_rss_bytes(pid) for pid in pids))

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)


def peak_rss_mb(pid: int) -> float | None:
    """A live process's own peak RSS over its life (VmHWM), MiB."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def descendants_peak_rss_mb(pid: int) -> float:
    """The summed peak RSS (VmHWM) of a live process's live descendants (a daemon's job
    worker processes), MiB."""
    return round(sum(peak_rss_mb(child) or 0.0
                     for child in _tree(pid, _process_table()) - {pid}), 1)


def kill_tree(root_pid: int) -> None:
    """SIGKILL a process and all its descendants (e.g. a trainer and its DataLoader workers)."""
    for pid in _tree(root_pid, _process_table()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat. Busy minus what
    a benchmark's own processes used is work by others; steal is time the hypervisor gave to
    other guests. Both are noise that neither side of a comparison caused."""
    with open("/proc/stat") as f:
        # cpu user nice system idle iowait irq softirq steal ...
        user, nice, system, _, _, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS_PER_S, steal / CLOCK_TICKS_PER_S


def machine_written_bytes() -> int:
    """Bytes the kernel has written from the page cache to disk so far (/proc/vmstat
    nr_written, the whole machine): what a cache that outlives the kernel's writeback
    threshold costs (docs/performance.md#the-store-and-the-disk). 0 where it cannot be read."""
    try:
        with open("/proc/vmstat") as f:
            pages = next(int(line.split()[1]) for line in f if line.startswith("nr_written "))
    except (OSError, StopIteration, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def machine_busy_cores(interval_s: float = 2.0) -> float:
    """How many cores the machine kept busy over `interval_s` (call it while idle yourself)."""
    busy_before_s, _ = machine_cpu_seconds()
    time.sleep(interval_s)
    return round((machine_cpu_seconds()[0] - busy_before_s) / interval_s, 2)


# -- a sandfs mount ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    mountpoint: Path
    pid: int
    mount_s: float  # from starting `sandfs mount` to serving (dataset scan, plan, mount)
    ready_at: float  # time.monotonic() when it first served status.json
    ready_cpu_s: float  # the daemon tree's CPU seconds then (scan and start-up)

    @property
    def launched_at(self) -> float:
        """time.monotonic() when `sandfs mount` was started."""
        return self.ready_at - self.mount_s

    def status(self) -> dict:
        return json.loads((self.mountpoint / ".sand" / "status.json").read_bytes())


def checkout_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment and `env`, this checkout first on the path: the daemon a benchmark
    starts (`python -P` leaves the working directory off its path) runs the sandfs the
    benchmark imports, not one installed elsewhere (a worktree measured beside another)."""
    path = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **(env or {})}


@contextlib.contextmanager
def sandfs_mount(workdir: Path, configs: Sequence[Path], *, k_epochs: int, workers: int,
                 name: str = "mnt", extra_args: Sequence[str] = (),
                 env: dict[str, str] | None = None, keep_cache: bool = False
                 ) -> Iterator[Mount]:
    """A fresh mount with an empty cache dir (so every mount starts cold); always unmounted, the
    daemon always gone and its cache dir removed on exit, whatever happened (exceptions, Ctrl-C).
    `keep_cache`: the cache dir is neither emptied first nor removed after (a warm remount).
    The daemon's log stays in `workdir`."""
    mountpoint, cache_dir = workdir / name, workdir / f"{name}-cache"
    log_path = workdir / f"{name}.log"
    if not keep_cache:
        shutil.rmtree(cache_dir, ignore_errors=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    args = [*sandfs_argv("mount"), str(mountpoint), "--foreground",
            "--cache-dir", str(cache_dir), "--k-epochs", str(k_epochs), "--workers", str(workers),
            *extra_args]
    for config in configs:
        args += ["--config", str(config)]
    process = None
    ready_read, ready_write = os.pipe()
    started_at = time.monotonic()
    try:
        with open(log_path, "ab") as log:
            process = subprocess.Popen([*args, "--ready-fd", str(ready_write)], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, pass_fds=(ready_write,),
                                       cwd=REPO_ROOT, env=checkout_env(env))
        os.close(ready_write)
        ready_write = None
        wait_ready(ready_read, log_path)
        ready_at = time.monotonic()
        yield Mount(mountpoint, process.pid, ready_at - started_at, ready_at,
                    tree_cpu_seconds(process.pid))
    finally:
        for fd in (ready_read, ready_write):
            if fd is not None:
                os.close(fd)
        unmount(mountpoint, process)
        if not keep_cache:
            shutil.rmtree(cache_dir, ignore_errors=True)


def wait_ready(ready_fd: int, log_path: Path) -> None:
    """Until the daemon says on its `--ready-fd` that it serves (the moment `sandfs mount`
    returns to a user's shell); RuntimeError with its log's tail when it says otherwise, exits
    or takes longer than MOUNT_TIMEOUT_S."""
    readable, _, _ = select.select([ready_fd], [], [], MOUNT_TIMEOUT_S)
    answer = os.read(ready_fd, 4096).decode(errors="replace").strip() if readable else ""
    if answer != "ready":
        raise RuntimeError(f"sandfs did not serve ({answer or 'no answer'}):\n"
                           f"{log_path.read_text(errors='replace')[-3000:]}")


def unmount(mountpoint: Path, process: subprocess.Popen | None) -> None:
    """fusermount3 -u, then -uz; SIGTERM then SIGKILL the daemon's process group."""
    for flags in ("-u", "-uz"):
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", flags, str(mountpoint)], capture_output=True)
    if process is not None:
        stop_process_group(process)
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


def stop_process_group(process: subprocess.Popen, grace_s: float = 15.0) -> None:
    try:
        process.wait(timeout=grace_s)
        return
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def run_guarded(work_dir: Path, body: Callable[[], None]) -> int:
    """Run a benchmark's passes: 130 on Ctrl-C, 1 when a mount is left under `work_dir`."""
    try:
        body()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        left = mounts_under(work_dir)
        if left:
            print(f"error: mounts left behind: {json.dumps(left)}", file=sys.stderr)
    return 1 if mounts_under(work_dir) else 0
