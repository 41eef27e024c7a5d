"""The mount harness: start a real sandfs daemon, wait until it serves, and always
take it down again — strictly when the test passed, forgivingly when it failed — then check
that no mount and no process is left and that the daemon's log holds no unexpected errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from sandfs.media.synth import make_dataset
from tests.helpers.mountwatch import is_mounted, wait_served

MOUNT_TIMEOUT_SECONDS = 60.0
STATUS_READ_SECONDS = 30.0  # a status.json read unanswered this long fails the test
LOG_ERROR = re.compile(r" (ERROR|CRITICAL) |Traceback \(most recent call last\)")


def fuse_skip_reason() -> str | None:
    """Why a real mount cannot run here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        return f"cannot open /dev/fuse: {exc.strerror}"
    if subprocess.run(["which", "fusermount3"], capture_output=True).returncode != 0:
        return "fusermount3 is not installed"
    return None


def require_fuse() -> None:
    reason = fuse_skip_reason()
    if reason is None:
        return
    if os.environ.get("SANDFS_REQUIRE_FUSE") == "1":
        pytest.fail(f"FUSE required (SANDFS_REQUIRE_FUSE=1) but unavailable: {reason}")
    pytest.skip(f"FUSE unavailable: {reason}")


@dataclass
class Mounted:
    mountpoint: Path
    process: subprocess.Popen
    log_path: Path
    cache_dir: Path
    expected_log_errors: int = 0  # a test that provokes errors declares how many
    extra: dict = field(default_factory=dict)

    def path(self, *parts: str) -> Path:
        return self.mountpoint.joinpath(*parts)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def sandfs_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "sandfs", *args]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`sandfs ARGS...` in a child process, its output captured as text."""
    return subprocess.run(sandfs_command(*args), capture_output=True, text=True, timeout=timeout)


def start_daemon(mountpoint: Path, configs: Sequence[Path], cache_dir: Path, log_path: Path,
                 extra_args: Sequence[str] = (), env: dict | None = None,
                 wrapper: Sequence[str] = (), cwd: Path | None = None) -> subprocess.Popen:
    """The daemon in the foreground, its output into `log_path`; `wrapper` is a command that
    execs its arguments (so the process is the daemon's), e.g. to run it as another user."""
    # threads unless a test names its mode: `auto` picks processes on 16 cores or more, where
    # fault points count per process and isolated steps' status stays the workers'
    # (docs/design.md#execution-threads-or-processes); the last --execution given wins
    args = ["mount", str(mountpoint), "--foreground", "--cache-dir", str(cache_dir),
            "--execution", "threads"]
    for config in configs:
        args += ["--config", str(config)]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [*wrapper, *sandfs_command(*args, *extra_args)], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})},
            cwd=cwd,
        )


def status_of(mountpoint: Path) -> dict:
    return json.loads(read_within(mountpoint / ".sand" / "status.json", STATUS_READ_SECONDS))


def read_within(path: Path, timeout_s: float) -> bytes:
    """`path`'s bytes, read in a thread of its own: a mount that stops answering fails the
    test (TimeoutError) instead of hanging it; the thread stays in its read until the
    teardown ends the mount."""
    done: list[bytes | BaseException] = []

    def read() -> None:
        try:
            done.append(path.read_bytes())
        except BaseException as error:  # raised in the test's thread
            done.append(error)

    reader = threading.Thread(target=read, name=f"read {path.name}", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not done:
        raise TimeoutError(f"{path}: no answer within {timeout_s:g} s")
    if isinstance(done[0], BaseException):
        raise done[0]
    return done[0]


def wait_scanned(mountpoint: Path, process: subprocess.Popen, log_path: Path,
                 stalled_s: float = 60, seconds: float = 300) -> dict:
    """status.json once every listed file of the first dataset is probed (its index written).
    Fails, with the scan's status and the log's tail, when the daemon exits, the count of
    probed files stands still for `stalled_s` (a busy machine only slows it), or after
    `seconds`."""
    started = progressed = time.monotonic()
    scanned = -1
    while True:
        if process.poll() is not None:
            pytest.fail(f"the daemon exited ({process.returncode}) during its scan:\n"
                        f"{log_tail(log_path)}")
        status = status_of(mountpoint)
        dataset = status["scan"]["datasets"][0]
        if dataset["videos_scanned"] >= dataset["videos_total"]:
            return status
        now = time.monotonic()
        if dataset["videos_scanned"] != scanned:
            scanned, progressed = dataset["videos_scanned"], now
        if now - progressed >= stalled_s or now - started >= seconds:
            pytest.fail(f"the scan stalled at {scanned}/{dataset['videos_total']} for "
                        f"{now - progressed:.0f} s ({now - started:.0f} s in all); "
                        f"status.json scan: {status['scan']}\n{log_tail(log_path)}")
        time.sleep(0.05)


def log_tail(log_path: Path, chars: int = 4000) -> str:
    return "daemon log's tail:\n" + log_path.read_text(errors="replace")[-chars:]


def wait_mounted(mountpoint: Path, process: subprocess.Popen, log_path: Path) -> None:
    wait_served(mountpoint, process, log_path, MOUNT_TIMEOUT_SECONDS)


def strict_teardown(mounted: Mounted) -> None:
    """After a passing test: a clean unmount must work and the daemon must exit 0."""
    if is_mounted(mounted.mountpoint):
        done = subprocess.run(["fusermount3", "-u", str(mounted.mountpoint)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"fusermount3 -u failed: {done.stderr}"
    code = mounted.process.wait(timeout=15)
    assert code == 0, f"daemon exited {code}:\n{mounted.log_text()[-3000:]}"


def forgiving_teardown(mountpoint: Path, process: subprocess.Popen | None) -> None:
    """After a failure: whatever state things are in, leave no mount and no process behind."""
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True)
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


def check_log(mounted: Mounted) -> None:
    errors = [line for line in mounted.log_text().splitlines() if LOG_ERROR.search(line)]
    assert len(errors) == mounted.expected_log_errors, (
        f"daemon log has {len(errors)} error lines, expected {mounted.expected_log_errors}:\n"
        + "\n".join(errors[:20])
    )


@contextlib.contextmanager
def mount_sandfs(workdir: Path, configs: Sequence[Path], *, extra_args: Sequence[str] = (),
                 env: dict | None = None, name: str = "mnt",
                 cwd: Path | None = None) -> Iterator[Mounted]:
    """Mount, yield, and always unmount: strictly on success, forgivingly on failure. `cwd`:
    the folder the daemon is started from (default: the test's)."""
    require_fuse()
    mountpoint, cache_dir = workdir / name, workdir / f"{name}-cache"
    with contextlib.suppress(OSError):  # a stale mount answers ENOTCONN: sandfs cleans it
        mountpoint.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    process = None
    try:
        process = start_daemon(mountpoint, configs, cache_dir, log_path, extra_args, env,
                               cwd=cwd)
        wait_mounted(mountpoint, process, log_path)
        mounted = Mounted(mountpoint, process, log_path, cache_dir)
        yield mounted
        strict_teardown(mounted)
        check_log(mounted)
    finally:
        forgiving_teardown(mountpoint, process)
        assert not is_mounted(mountpoint), f"{mountpoint} is still mounted"
        assert process is None or process.poll() is not None, "the daemon is still running"


def task_config(dataset: Path, **overrides) -> dict:
    """A task config dict; `overrides` replace top-level keys or `sampling`/`augmentation`."""
    sampling = {"videos_per_batch": 4, "frames_per_video": 4, "frame_stride": 2,
                "samples_per_video": 1, "drop_last": False}
    sampling |= overrides.pop("sampling", {})
    augmentation = overrides.pop("augmentation", [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["resized"],
         "config": [{"resize": {"shape": [36, 48]}}]},
        {"name": "maybe_flip", "branch_type": "random", "inputs": ["resized"],
         "outputs": ["flipped"],
         "branches": [{"prob": 0.5, "config": [{"flip": {"direction": "horizontal"}}]},
                      {"prob": 0.5, "config": []}]},
        {"name": "crop", "branch_type": "single", "inputs": ["flipped"], "outputs": ["cropped"],
         "config": [{"random_crop": {"size": [32, 32]}}]},
    ])
    config = {
        "task": "t0", "seed": 0, "epochs": 3,
        "dataset": {"tag": "train", "input_source": "file", "video_dataset_path": str(dataset),
                    "extensions": [".mp4"], "labels": "dirname", "sampling": sampling,
                    "augmentation": augmentation},
        "engine": {"k_epochs": 2, "workers": 2},
    }
    return config | overrides


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def free_port() -> int:
    """A loopback TCP port free right now (for --metrics-port, or a local store to listen on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mounted_for_users(prefix: str, extra_args: Sequence[str]) -> Iterator[Mounted]:
    """Root's task `t0` on a world-readable dataset (`.data` on the mount), for tests of what
    other users may do beside it; the folder is removed after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "data", classes=["a", "b"], videos_per_class=2,
                 num_frames=(24, 32), size=(64, 48), seed=5, gop=12)
    config = write_config(folder / "t0.yaml", task_config(folder / "data", task="t0"))
    try:
        with mount_sandfs(folder / "run", [config], extra_args=extra_args) as m:
            m.data = folder / "data"
            yield m
    finally:
        shutil.rmtree(folder, ignore_errors=True)
