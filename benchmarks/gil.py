"""Who holds a process's GIL, and for how long: `py-spy record --gil --threads` run beside a
benchmark's daemon, its samples summed by thread role.

py-spy with `--gil` keeps only the samples of the thread holding the GIL, so `samples / rate`
is the time the GIL was held while it sampled. Threads are grouped by role (`thread_role`):
`loop` (the main thread: trio and pyfuse3's handlers), `job VideoJobKey` (decode passes),
`job ViewKey` (batches read back from disk), `plan`, `save_carried`... On a machine busy with
other work a thread preempted while it holds the GIL still holds it: the figures are those of
a quiet machine only (`cpu_others_s` says how quiet it was).
What holds the GIL does not spread over cores, so `1 / GIL held per batch` bounds the batches a
second one daemon can serve on any machine.

Sampling is non-blocking (the daemon is never paused) unless asked: its figures are those of
an undisturbed run, at the price of a rare torn sample.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RATE_HZ = 250
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
SAMPLING = b"Sampling process"  # what py-spy prints once it samples
# "thread (0x7f12...): NAME;frame;frame COUNT"; py-spy leaves out ": NAME" for unnamed threads
RAW_LINE = re.compile(r"^thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: ([^;]*))?(?:;.*)? (\d+)$")
TO_THREAD = " from "  # trio names a worker thread "FUNCTION from TASK"
LOOP_THREAD = "MainThread"
FRAME_LINE = re.compile(r":\d+\)$")  # "function (file.py:LINE)": the line


def py_spy() -> str | None:
    """The py-spy next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def thread_role(name: str | None) -> str:
    """`loop`; a trio worker thread ("FUNCTION from TASK") by its function, or by its trio
    task's name up to the first "(" where the function has no name (a partial: the scheduler's
    jobs, "job VideoJobKey(...)"); another thread by its name without a trailing number."""
    if name is None:
        return "unnamed"
    if name == LOOP_THREAD:
        return "loop"
    if TO_THREAD in name:
        function, task = name.split(TO_THREAD, 1)
        return function if function != "None" else task.split("(", 1)[0].strip() or "trio"
    return re.sub(r"[-_ ]?\d+$", "", name) or name


def parse_raw(text: str) -> Counter[tuple[int | None, str]]:
    """Samples per (native thread id, thread role) in py-spy's raw (collapsed stack) output;
    the id None where py-spy gave a pthread handle (hex) instead."""
    samples: Counter[tuple[int | None, str]] = Counter()
    for line in text.splitlines():
        match = RAW_LINE.match(line.strip())
        if match:
            tid, name, count = match.groups()
            native = None if tid.startswith("0x") else int(tid)
            samples[native, thread_role(name)] += int(count)
    return samples


def by_function(text: str, role: str = "loop") -> tuple[int, Counter[str]]:
    """The samples of the threads of `role` in py-spy's raw output, and of them those under each
    function (inclusive: a sample counts once for each function on its stack), the function
    named as py-spy names it without its line: where a thread's time goes."""
    total, under = 0, Counter()
    for line in text.splitlines():
        match = RAW_LINE.match(line.strip())
        if not match or thread_role(match.group(2)) != role:
            continue
        count = int(match.group(3))
        total += count
        frames = line.strip().rsplit(" ", 1)[0].split(";")[1:]
        under.update(dict.fromkeys({FRAME_LINE.sub(")", f) for f in frames}, count))
    return total, under


def sched_times(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of `pid`: (ns on a CPU, ns runnable but waiting for one), from
    /proc/PID/task/TID/schedstat; {} where the kernel keeps no such figures."""
    times = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            run_ns, wait_ns, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        times[int(task.name)] = (int(run_ns), int(wait_ns))
    return times


def on_cpu_share(before: Mapping[int, tuple[int, int]],
                 after: Mapping[int, tuple[int, int]], tid: int | None) -> float:
    """The share of its runnable time the thread spent on a CPU between the two readings (1.0
    where unknown: a thread that ended, no schedstat)."""
    if tid is None or tid not in after:
        return 1.0
    run_ns, wait_ns = (a - b for a, b in zip(after[tid], before.get(tid, (0, 0)), strict=True))
    return run_ns / (run_ns + wait_ns) if run_ns + wait_ns > 0 else 1.0


@dataclass(frozen=True, slots=True)
class GilProfile:
    """The GIL held while sampled, in seconds, by thread role: as sampled (`by_role_s`), and
    of it the share its thread was on a CPU (`by_role_cpu_s`). A thread preempted by other
    processes while it holds the GIL still holds it; on a quiet machine with cores to spare the
    two agree, and the second is what bounds one daemon there."""

    rate_hz: int
    by_role_s: dict[str, float]
    by_role_cpu_s: dict[str, float]
    lagging: bool  # py-spy said it fell behind: fewer samples than `rate_hz` a second

    @property
    def held_s(self) -> float:
        return sum(self.by_role_s.values())

    @property
    def held_cpu_s(self) -> float:
        return sum(self.by_role_cpu_s.values())

    def per_batch(self, batches: int, wall_s: float | None = None) -> dict:
        """The figures a benchmark reports beside its batches/s: GIL ms per batch served, by
        role (`loop` and the worker threads together as `threads`), and the ceiling."""
        if batches < 1:
            raise ValueError("no batch served: nothing to divide the GIL's time by")
        record = {}
        for prefix, by_role in (("gil", self.by_role_s), ("gil_cpu", self.by_role_cpu_s)):
            total_ms = sum(by_role.values()) * 1e3 / batches
            loop_ms = by_role.get("loop", 0.0) * 1e3 / batches
            record |= {f"{prefix}_ms_per_batch": round(total_ms, 2),
                       f"{prefix}_ms_per_batch_loop": round(loop_ms, 2),
                       f"{prefix}_ms_per_batch_threads": round(total_ms - loop_ms, 2),
                       f"{prefix}_ms_per_batch_by_role": {
                           role: round(s * 1e3 / batches, 2)
                           for role, s in sorted(by_role.items(), key=lambda kv: -kv[1])}}
        cpu_ms = record["gil_cpu_ms_per_batch"]
        record |= {"gil_ceiling_batches_per_s": round(1e3 / cpu_ms, 1) if cpu_ms else None,
                   "gil_rate_hz": self.rate_hz, "gil_sampler_lagging": self.lagging}
        if wall_s:
            record["gil_held_share"] = round(self.held_s / wall_s, 3)
        return record

    def per_gb(self, nbytes: int) -> dict:
        """GIL ms per GB served (`bench_read`): as sampled, on a CPU, the loop's on a CPU."""
        gb = nbytes / 1e9
        return {"gil_ms_per_gb": round(self.held_s * 1e3 / gb, 1),
                "gil_cpu_ms_per_gb": round(self.held_cpu_s * 1e3 / gb, 1),
                "gil_cpu_ms_per_gb_loop": round(self.by_role_cpu_s.get("loop", 0.0) * 1e3 / gb,
                                                1),
                "gil_sampler_lagging": self.lagging}


class GilSampler:
    """`with GilSampler(pid) as sampler: ...` samples `pid` for the block; then
    `sampler.profile` is what it found. RuntimeError if py-spy is missing or cannot attach
    (it needs ptrace rights over the process: the same user, and a yama ptrace_scope of 0, or
    root)."""

    def __init__(self, pid: int, rate_hz: int = DEFAULT_RATE_HZ, blocking: bool = False,
                 keep_raw: Path | None = None) -> None:
        """`keep_raw`: copy py-spy's samples there (collapsed stacks, for a flame graph)."""
        self.pid, self.rate_hz, self.blocking, self.keep_raw = pid, rate_hz, blocking, keep_raw
        self.profile: GilProfile | None = None
        self._times: dict[int, tuple[int, int]] = {}
        self._said = b""  # py-spy's words (it writes them to stdout)
        self._dir: tempfile.TemporaryDirectory | None = None
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> GilSampler:
        self._times = sched_times(self.pid)
        executable = py_spy()
        if executable is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self._dir = tempfile.TemporaryDirectory(prefix="sandfs-gil-")
        args = [executable, "record", "--gil", "--threads", "--format", "raw",
                "--rate", str(self.rate_hz), "--pid", str(self.pid),
                "--output", str(self._out), *([] if self.blocking else ["--nonblocking"])]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._said = self._until_sampling()
        return self

    def _until_sampling(self) -> bytes:
        """What py-spy says until it samples (it attaches first, 0.1-1 s on a busy machine),
        or exits: the block is measured from then on."""
        said, out = b"", self._process.stdout
        deadline = time.monotonic() + START_TIMEOUT_S
        while SAMPLING not in said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                break
            chunk = os.read(out.fileno(), 4096)
            if not chunk:  # it exited
                break
            said += chunk
        return said

    @property
    def _out(self) -> Path:
        return Path(self._dir.name) / "gil.txt"

    def __exit__(self, *exc_info) -> None:
        try:
            self.profile = self._stop()
        finally:
            self._dir.cleanup()

    def _stop(self) -> GilProfile:
        """SIGINT makes py-spy write what it sampled and exit."""
        times = sched_times(self.pid)
        process = self._process
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            rest, _ = process.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            rest, _ = process.communicate()
        said = (self._said + rest).decode(errors="replace")
        if not self._out.exists():
            raise RuntimeError(f"py-spy wrote no samples (exit {process.returncode}):\n"
                               f"{said[-2000:]}")
        if self.keep_raw is not None:
            shutil.copyfile(self._out, self.keep_raw)
        wall: Counter[str] = Counter()
        on_cpu: Counter[str] = Counter()
        for (tid, role), count in parse_raw(self._out.read_text()).items():
            wall[role] += count / self.rate_hz
            on_cpu[role] += count / self.rate_hz * on_cpu_share(self._times, times, tid)
        return GilProfile(self.rate_hz, dict(wall), dict(on_cpu), lagging="behind" in said)


def main() -> None:
    """Where a thread role's GIL time goes, by function, from `--gil-raw` files:
    `benchmarks/gil.py RAW... --batches N` (ms a batch at py-spy's `--rate`)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("raw", nargs="+", type=Path, help="py-spy raw files (--gil-raw)")
    parser.add_argument("--role", default="loop", help="thread role (default: loop)")
    parser.add_argument("--batches", type=int, help="batches served over all the files")
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE_HZ, help="py-spy's --rate")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    total, under = 0, Counter()
    for path in args.raw:
        samples, functions = by_function(path.read_text(), args.role)
        total, under = total + samples, under + functions
    print(f"{total} samples of {args.role!r}")
    for function, count in under.most_common(args.top):
        per_batch = (f" {count / args.rate * 1e3 / args.batches:6.2f} ms a batch"
                     if args.batches else "")
        print(f"{100 * count / max(total, 1):5.1f}%{per_batch}  {function}")


if __name__ == "__main__":
    main()
