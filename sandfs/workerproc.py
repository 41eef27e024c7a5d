"""A worker process for isolating risky work (probing videos, custom steps): a fresh
interpreter running `code` with two pipe ends as `sys.argv[1]` (jobs in) and `sys.argv[2]`
(replies out). Not multiprocessing: its spawn re-runs an unguarded `__main__` script, and fork
copies the parent's threads and descriptors. The child inherits only those two pipe ends and
starts its own session, so Ctrl-C reaches the parent, which stops its workers.

The interpreter starts isolated (`-I`: no current folder, user site or PYTHON* variables on its
import path) in `/`, with an explicit import path: a root daemon must never import a `sandfs/`
planted in the folder it was started from (docs/deploy.md#what-the-daemon-opens)."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

ORPHAN_CHECK_SECONDS = 0.5
W = TypeVar("W", "WorkerProcess", "SocketWorker")


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    process: subprocess.Popen
    jobs: Connection  # parent -> worker
    replies: Connection  # worker -> parent

    def stop(self, grace_s: float = 1.0) -> None:
        """Close its pipes (an idle worker reads EOF and exits); killed after `grace_s`."""
        self.jobs.close()
        self.replies.close()
        _wait_or_kill(self.process, grace_s)


def package_parent() -> str:
    """The folder this process imported the `sandfs` package from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_worker_process(code: str, import_path: Sequence[str] = ()) -> WorkerProcess:
    """`code` in a fresh isolated interpreter, importing from this process's `sandfs`, then
    `import_path` (absolute folders), then its site-packages; its two pipe ends given as
    arguments."""
    job_read, job_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        process = _spawn(code, import_path, (job_read, reply_write))
    except BaseException:
        os.close(job_write)
        os.close(reply_read)
        raise
    finally:
        os.close(job_read)
        os.close(reply_write)
    return WorkerProcess(process, Connection(job_write, readable=False),
                         Connection(reply_read, writable=False))


@dataclass(frozen=True, slots=True)
class SocketWorker:
    """A worker fed through one Unix socket, which carries descriptors too (SCM_RIGHTS)."""

    process: subprocess.Popen
    channel: socket.socket

    def stop(self, grace_s: float = 1.0) -> None:
        """Close its socket (an idle worker reads EOF and exits); killed after `grace_s`."""
        self.channel.close()
        _wait_or_kill(self.process, grace_s)


def start_socket_worker(code: str, import_path: Sequence[str] = ()) -> SocketWorker:
    """As `start_worker_process`, the worker's end of a Unix socket pair as its argument."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        process = _spawn(code, import_path, (theirs.fileno(),))
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return SocketWorker(process, ours)


def _spawn(code: str, import_path: Sequence[str], fds: tuple[int, ...]) -> subprocess.Popen:
    path = [package_parent(), *(p for p in import_path if os.path.isabs(p))]
    return subprocess.Popen(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {path!r}; {code}",
         *map(str, fds)],
        stdin=subprocess.DEVNULL, pass_fds=fds, cwd="/", start_new_session=True,
    )


def _wait_or_kill(process: subprocess.Popen, grace_s: float) -> None:
    if process.poll() is None:
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def how_it_ended(process: subprocess.Popen) -> str:
    """How a worker that stopped answering ended: its signal or exit code."""
    try:
        code = process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return "still running"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def resolve(module: str, qualname: str) -> Any:
    """In a worker: what `module`.`qualname` names, importing the module as the daemon did."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def exit_when_orphaned(daemon_pid: int) -> None:
    """In a worker: a daemon killed outright (SIGKILL) cannot stop a worker busy in a job, and
    the closed channel only reaches it after the job: such a worker exits once it sees it was
    orphaned (run in a daemon thread)."""
    while os.getppid() == daemon_pid:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os._exit(1)


class WorkerPool(Generic[W]):
    """Up to `size` workers, started on demand by `start` (which raises when one cannot),
    each used by one caller at a time. A worker handed back unhealthy (dead, or stopped
    mid-work) is stopped at once and replaced by the next `acquire`; so is one found dead
    while idle."""

    def __init__(self, size: int, start: Callable[[], W], closed: Callable[[], Exception],
                 stopped: Callable[[W], None] = lambda worker: None) -> None:
        """`stopped(worker)`: told of each worker stopped."""
        self.size = size
        self._start, self._stopped, self._closed_error = start, stopped, closed
        self._idle: list[W] = []
        self._lent: dict[int, W] = {}  # acquired, not released yet, by id
        self._closed = False
        self._cond = threading.Condition()
        self.started = self.uses = self.replaced = 0

    def acquire(self) -> W:
        with self._cond:
            while True:
                while not self._idle and self.started >= self.size and not self._closed:
                    self._cond.wait()
                if self._closed:
                    raise self._closed_error()
                if not self._idle:
                    break
                worker = self._idle.pop()
                if worker.process.poll() is None:
                    self._lent[id(worker)] = worker
                    return worker
                self._stop(worker)  # it died while idle (killed from outside)
                self.started -= 1
                self.replaced += 1
            self.started += 1
        worker = self._start_one()
        with self._cond:
            self._lent[id(worker)] = worker
        return worker

    def warm(self) -> None:
        """Start one more worker now (in this thread), idle until its first use: the first
        job does not wait for an interpreter to start."""
        with self._cond:
            if self._closed or self.started >= self.size:
                return
            self.started += 1
        worker = self._start_one()
        with self._cond:
            if not self._closed:
                self._idle.append(worker)
                self._cond.notify()
                return
            self.started -= 1
        self._stop(worker)

    def _start_one(self) -> W:
        """A worker counted in `started` already; uncounted if it cannot start."""
        try:
            return self._start()
        except BaseException:
            with self._cond:
                self.started -= 1
                self._cond.notify()
            raise

    def release(self, worker: W, *, healthy: bool) -> None:
        if not healthy:
            self._stop(worker, 0.0)
        with self._cond:
            self._lent.pop(id(worker), None)
            self.uses += 1
            if healthy and not self._closed:
                self._idle.append(worker)
            else:
                self.started -= 1
                self.replaced += not healthy
                if healthy:
                    self._stop(worker)
            self._cond.notify()

    def _stop(self, worker: W, grace_s: float = 1.0) -> None:
        worker.stop(grace_s)
        self._stopped(worker)

    def close(self) -> None:
        """Stop the workers: the idle ones, and those still lent (a paused pass's: nothing
        runs on them once their users have stopped)."""
        with self._cond:
            self._closed = True
            workers = [*self._idle, *self._lent.values()]
            self._idle, self._lent = [], {}
            self._cond.notify_all()
        for worker in workers:
            self._stop(worker)
