"""The chaos run (scripts/reliability.py --chaos, tests/mount/test_chaos.py): one real mount, a
healthy task read continuously and checked byte for byte against the reference, and a seeded
random sequence of what users and machines do to it — tasks registered and removed through
every path (valid, invalid and resource-hungry configs, tasks whose work hits a fault point),
readers and lease holders killed, cache files corrupted, the cache disk filled. Each operation
is drawn from `random.Random(seed)`, so a failing seed replays the same sequence."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from sandfs.faults import STAGES
from sandfs.media.synth import make_dataset
from tests.helpers.churn import HANG_S, register_and_remove, write_task
from tests.helpers.harness import (
    forgiving_teardown,
    sandfs_command,
    start_daemon,
    task_config,
    wait_mounted,
    write_config,
)
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view

HEALTHY_EPOCHS = 4  # the healthy reader cycles through them: each lap plans every window again
TMPFS_BYTES = 96 << 20  # the cache disk
MEMORY_LIMIT = "96M"
HUNGRY_HW = (720, 960)  # a resource-hungry task's frames: 66 MB batches against MEMORY_LIMIT
# a fault at every stage, each for a task of its own name: registering it fires the point
FAULTS = ",".join(f"{stage}:*:raise:fault-{stage.replace('_', '-')}" for stage in STAGES)
# a decode pass (and its admission) is every reading task's: a task whose pass fails there
# reads a copy of the videos, its passes its own (docs/contract.md#7-errors)
OWN_PASSES = {"decode", "admission"}
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Report:
    seed: int
    minutes: float
    operations: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # what the daemon refused, by kind
    healthy_views_read: int = 0
    wrong_bytes: int = 0
    healthy_errors: list[str] = field(default_factory=list)  # none is documented
    daemon_deaths: int = 0
    hangs: int = 0
    memory_over_limit_max_bytes: int = 0  # status.json memory_bytes - memory_limit_bytes
    memory_allowed_over_bytes: int = 0  # the documented exception: one batch and its pass
    disk_fill: str = "tmpfs"  # or why it was skipped
    failure: str | None = None

    def ok(self) -> bool:
        return (not self.daemon_deaths and not self.wrong_bytes and not self.healthy_errors
                and not self.hangs and self.failure is None
                and self.memory_over_limit_max_bytes <= self.memory_allowed_over_bytes)

    def to_json(self) -> dict:
        out = asdict(self)
        out["operations"] = dict(sorted(self.operations.items()))
        out["refused"] = dict(sorted(self.refused.items()))
        out["healthy_errors"] = self.healthy_errors[:10]
        out["healthy_error_count"] = len(self.healthy_errors)
        out["ok"] = self.ok()
        if not self.ok():
            out["replay"] = f"scripts/reliability.py --chaos {self.minutes} --seed {self.seed}"
        return out


class HealthyReader:
    """Reads the healthy task's views, epoch after epoch, round and round, each compared with
    the reference."""

    def __init__(self, mountpoint: Path, references: dict[tuple[int, int], bytes],
                 report: Report) -> None:
        self.mountpoint, self.references, self.report = mountpoint, references, report
        self.stop = threading.Event()
        self.started_at: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="healthy reader")

    def _run(self) -> None:
        keys = sorted(self.references)
        while not self.stop.is_set():
            for epoch, iteration in keys:
                self.started_at = time.monotonic()
                try:
                    data = self.mountpoint.joinpath(
                        "healthy", str(epoch), str(iteration), "view").read_bytes()
                except OSError as exc:
                    self.report.healthy_errors.append(f"{epoch}/{iteration}: {exc}")
                    time.sleep(0.5)
                    continue
                finally:
                    self.started_at = None
                self.report.healthy_views_read += 1
                self.report.wrong_bytes += data != self.references[epoch, iteration]

    def hung(self) -> bool:
        started = self.started_at
        return started is not None and time.monotonic() - started > HANG_S


class Chaos:
    def __init__(self, workdir: Path, dataset: Path, seed: int, minutes: float) -> None:
        self.workdir, self.dataset = workdir, dataset
        self.own_copy = workdir / "videos-copy"  # the same files at another path
        self.rng = random.Random(seed)
        self.report = Report(seed, minutes)
        self.mountpoint = workdir / "mnt"
        self.cache_disk = workdir / "cache-disk"
        self.registered: set[str] = set()
        self.holders: dict[str, subprocess.Popen] = {}  # lease holders, by task
        self.readers: list[subprocess.Popen] = []
        self.filler: Path | None = None
        self.counter = 0

    # -- setup ------------------------------------------------------------------------------

    def mount_cache_disk(self) -> None:
        self.cache_disk.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES},mode=700",
                               "tmpfs", str(self.cache_disk)], capture_output=True, text=True)
        if done.returncode:
            self.report.disk_fill = f"skipped: tmpfs not mounted ({done.stderr.strip()})"

    def unmount_cache_disk(self) -> None:
        if self.report.disk_fill == "tmpfs":
            subprocess.run(["umount", "-l", str(self.cache_disk)], capture_output=True)

    def config(self, name: str, dataset: Path | None = None, **overrides) -> dict:
        config = task_config(dataset or self.dataset, task=name,
                             **{"epochs": 1000, **overrides})
        config["engine"] = {"k_epochs": 1, "memory_limit": MEMORY_LIMIT}
        return config

    # -- the operations ---------------------------------------------------------------------

    def next_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def text(self, kind: str) -> tuple[str, str]:
        """(task name, YAML) of a config of this kind."""
        if kind == "fault":
            stage = self.rng.choice(STAGES)
            name = f"fault-{stage.replace('_', '-')}"
            dataset = self.own_copy if stage in OWN_PASSES else None
            return name, yaml.safe_dump(self.config(name, dataset,
                                                    seed=self.rng.randrange(100)))
        name = self.next_name({"valid": "trial", "invalid": "bad", "hungry": "huge"}[kind])
        config = self.config(name, seed=self.rng.randrange(100))
        if kind == "invalid":
            broken = self.rng.choice(["seed", "sampling", "yaml"])
            if broken == "yaml":
                return name, f"task: {name}\nseed: [unclosed\n"
            if broken == "seed":
                config["seed"] = "x"
            else:
                config["dataset"]["sampling"]["videos_per_batch"] = -1
        elif kind == "hungry":  # views far past memory_limit: refused, or failed alone
            config["dataset"]["augmentation"] = [
                {"name": "big", "branch_type": "single", "inputs": ["frame"],
                 "outputs": ["o"], "config": [{"resize": {"shape": list(HUNGRY_HW)}}]}]
            config["dataset"]["sampling"]["frames_per_video"] = 8
        return name, yaml.safe_dump(config, sort_keys=False)

    def op_register(self) -> None:
        kind = self.rng.choice(["valid", "valid", "invalid", "hungry", "fault"])
        path = self.rng.choice(["file", "cli", "client"])
        name, text = self.text(kind)
        if name in self.registered:
            return
        self.report.operations[f"register_{kind}_{path}"] += 1
        accepted = False
        if path == "file":
            met = write_task(self.mountpoint, name, text)
            accepted = not met
        elif path == "cli":
            config = self.workdir / f"{name}.yaml"
            config.write_text(text)
            done = subprocess.run(sandfs_command("task", "add", str(self.mountpoint),
                                                 str(config)), capture_output=True, timeout=120)
            accepted = done.returncode == 0
        else:  # the Python client, holding the task's lease in a process of its own
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(self.mountpoint), text],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
            line = holder.stdout.readline().decode().strip() if holder.stdout else ""
            accepted = line == "held"
            if accepted:
                self.holders[name] = holder
            else:
                end(holder)
        if accepted:
            self.registered.add(name)
            if kind in ("hungry", "fault"):
                self.start_reader(name)
        else:
            self.report.refused[kind] += 1

    def op_remove(self) -> None:
        if not self.registered:
            return
        name = self.rng.choice(sorted(self.registered))
        holder = self.holders.pop(name, None)
        if holder is not None:
            self.report.operations["kill_lease_holder"] += 1
            end(holder)
        elif self.rng.random() < 0.5:
            self.report.operations["remove_cli"] += 1
            subprocess.run(sandfs_command("task", "remove", str(self.mountpoint), name),
                           capture_output=True, timeout=120)
        else:
            self.report.operations["remove_file"] += 1
            with contextlib.suppress(OSError):
                os.unlink(self.mountpoint / ".sand" / "tasks" / f"{name}.yaml")
        self.registered.discard(name)

    def op_churn(self) -> None:
        self.report.operations["register_remove_churn"] += 1
        name = self.next_name("churn")
        text = yaml.safe_dump(self.config(name, seed=5))
        for _ in range(self.rng.randrange(1, 20)):
            register_and_remove(self.mountpoint, name, text)

    def start_reader(self, name: str) -> None:
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, str(self.mountpoint / name)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.readers.append(reader)

    def op_reader(self) -> None:
        if not self.registered:
            return
        self.report.operations["start_reader"] += 1
        self.start_reader(self.rng.choice(sorted(self.registered)))

    def op_kill_reader(self) -> None:
        alive = [r for r in self.readers if r.poll() is None]
        self.readers = alive
        if not alive:
            return
        self.report.operations["kill_reader"] += 1
        victim = self.rng.choice(alive)
        end(victim)
        self.readers.remove(victim)

    def op_corrupt(self) -> None:
        objects = sorted((self.cache_disk / "store" / "objects").rglob("*.obj"))
        if not objects:
            return
        self.report.operations["corrupt_cache_file"] += 1
        target = self.rng.choice(objects)
        with contextlib.suppress(OSError), open(target, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size:
                f.seek(self.rng.randrange(size))
                f.write(bytes([self.rng.randrange(256)]))

    def op_fill_disk(self) -> None:
        if self.report.disk_fill != "tmpfs":
            return
        if self.filler is not None:
            self.report.operations["free_cache_disk"] += 1
            self.filler.unlink(missing_ok=True)
            self.filler = None
            return
        self.report.operations["fill_cache_disk"] += 1
        self.filler = self.cache_disk / f"filler-{self.counter}"
        with contextlib.suppress(OSError), open(self.filler, "wb") as f:
            chunk = b"\0" * (1 << 20)
            while True:
                f.write(chunk)

    # -- the run ----------------------------------------------------------------------------

    def check_memory(self) -> None:
        try:
            status = json.loads((self.mountpoint / ".sand" / "status.json").read_bytes())
        except (OSError, ValueError):
            return
        over = status["memory_bytes"] - status["memory_limit_bytes"]
        self.report.memory_over_limit_max_bytes = max(self.report.memory_over_limit_max_bytes,
                                                      over)

    def run(self, daemon: subprocess.Popen, reader: HealthyReader) -> None:
        operations: list[Callable[[], None]] = [
            self.op_register, self.op_register, self.op_remove, self.op_churn,
            self.op_reader, self.op_kill_reader, self.op_corrupt, self.op_fill_disk]
        deadline = time.monotonic() + self.report.minutes * 60
        while time.monotonic() < deadline:
            self.rng.choice(operations)()
            self.check_memory()
            if daemon.poll() is not None:
                self.report.daemon_deaths += 1
                self.report.failure = f"the daemon exited {daemon.returncode}"
                return
            if reader.hung():
                self.report.hangs += 1
                self.report.failure = "a healthy read hung"
                return
            time.sleep(self.rng.uniform(0, 0.5))

    def cleanup(self) -> None:
        for process in [*self.holders.values(), *self.readers]:
            end(process)
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)


def end(process: subprocess.Popen) -> None:
    """SIGKILL (a kill mid-read, or a lease let go the hard way), reaped, its pipe closed."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


# a lease holder: registers through the client, says so, and holds the lease until killed
HOLDER = """
import sys, time
from sandfs.client import register_task
try:
    handle = register_task(sys.argv[1], sys.argv[2])
except Exception:
    print("refused", flush=True)
    sys.exit(1)
print("held", flush=True)
time.sleep(3600)
"""
# a trainer of a chaos task: reads its views until killed or its task ends
READER = """
import os, sys
root = sys.argv[1]
for epoch in range(1000):
    for iteration in range(3):
        try:
            with open(os.path.join(root, str(epoch), str(iteration), "view"), "rb") as f:
                f.read()
        except OSError:
            if not os.path.isdir(root):
                sys.exit(0)
"""


def run_chaos(minutes: float, seed: int, workdir: Path | None = None) -> Report:
    """One chaos run of `minutes` with `seed`, in `workdir` (a temporary one by default)."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="sandfs-chaos-")))
        dataset = workdir / "videos"
        make_dataset(dataset, classes=3, videos_per_class=4, num_frames=(24, 40),
                     size=(64, 48), seed=1, gop=12)
        chaos = Chaos(workdir, dataset, seed, minutes)
        shutil.copytree(dataset, chaos.own_copy)
        chaos.mount_cache_disk()
        stack.callback(chaos.unmount_cache_disk)
        config = write_config(workdir / "healthy.yaml", chaos.config(
            "healthy", epochs=HEALTHY_EPOCHS))
        plan = build_plan(config)
        references = {(e, i): reference_view(plan, e, i) for e in range(plan.epochs)
                      for i in range(plan.iterations_per_epoch)}
        chaos.report.memory_allowed_over_bytes = allowed_over(plan)
        chaos.mountpoint.mkdir()
        log_path = workdir / "mnt.log"
        daemon = start_daemon(chaos.mountpoint, [config], chaos.cache_disk, log_path,
                              env={"SANDFS_FAULT": FAULTS})
        stack.callback(forgiving_teardown, chaos.mountpoint, daemon)
        wait_mounted(chaos.mountpoint, daemon, log_path)
        reader = HealthyReader(chaos.mountpoint, references, chaos.report)
        reader.thread.start()
        try:
            chaos.run(daemon, reader)
        finally:
            reader.stop.set()
            chaos.cleanup()
            reader.thread.join(HANG_S)
            if reader.thread.is_alive():
                chaos.report.hangs += 1
        if chaos.report.failure is None:  # it ends as a clean unmount must: exit status 0
            chaos.report.failure = clean_exit_failure(chaos.mountpoint, daemon)
        if chaos.report.failure is not None:
            chaos.report.failure += f"; daemon log: {log_path}"
            stack.pop_all()  # kept for the post-mortem
        return chaos.report


def clean_exit_failure(mountpoint: Path, daemon: subprocess.Popen) -> str | None:
    done = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True,
                          text=True)
    if done.returncode:
        return f"fusermount3 -u failed: {done.stderr.strip()}"
    try:
        code = daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return "the daemon did not exit within 30 s of the unmount"
    return None if code == 0 else f"the daemon exited {code} after the unmount"


def allowed_over(plan) -> int:
    """The documented exception to memory_limit (docs/performance.md): a job a blocked reader
    waits for goes over by at most its decode pass and the batches it fills — bounded here by
    the largest batch a chaos task has (a hungry one's) and every frame of the largest video,
    decoded and resized to it."""
    sampling = plan.sampling
    batch = sampling.videos_per_batch * 8 * HUNGRY_HW[0] * HUNGRY_HW[1] * 3
    frames = max(v.num_frames for v in plan.videos) * HUNGRY_HW[0] * HUNGRY_HW[1] * 3
    return batch + frames
