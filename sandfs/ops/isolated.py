"""Custom steps out of process: an op class that sets `isolation = "process"` is applied in a
small pool of worker processes instead of the daemon's threads.

Why: a plug-in's own dependencies (another torch, a C extension) are loaded only in the
workers, never into the daemon, and a step that segfaults, calls os._exit, raises or hangs past
its `timeout_s` fails the clips that need it (their views read EIO) while the daemon serves on;
the dead or hung worker is killed and replaced by a fresh one on the next call. Within one
decode pass (`one_pass`) a step whose worker died or hung is not called again: its later calls
fail at once with the same reason, so a hang costs one `timeout_s` per pass, not one per frame.

How: each worker is a fresh interpreter (what multiprocessing's spawn starts, but without
re-running an unguarded `__main__`: sandfs/workerproc.py), started lazily on the first call and fed
through a pipe that carries only names and shapes: the frames travel through two POSIX shared
memory segments per call (input clip, output clip), created and always unlinked by the daemon,
so a worker that dies leaves nothing behind. The output's shape is the op's own static
`output_shape`/`output_frames` for the input, so it is allocated before the call.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import mmap
import os
import secrets
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from sandfs.ops.base import FrameShape, OpType
from sandfs.workerproc import (
    WorkerPool,
    WorkerProcess,
    exit_when_orphaned,
    how_it_ended,
    resolve,
    start_worker_process,
)

log = logging.getLogger(__name__)

ISOLATIONS = ("thread", "process")
POOL_PROCESSES = 2
START_TIMEOUT_SECONDS = 60.0
KEPT_FAILURES = 20
SHM_DIR = "/dev/shm"  # where Linux keeps POSIX shared memory segments, by name
# a segment is named for the daemon that made it: an operator (or a test beside other runs)
# tells one daemon's segments from another's and from other programs'
SEGMENT_PREFIX = "sandfs_"
_READY = "ready"
_WORKER_CODE = ("import sys; from sandfs.ops.isolated import worker_main; "
                "worker_main(int(sys.argv[1]), int(sys.argv[2]))")


class IsolatedOpError(RuntimeError):
    """An isolated op failed: it raised, its worker died, or it ran past its timeout."""


class WorkerLost(IsolatedOpError):
    """The op's worker died, hung or could not start: calling the step again in the same pass
    would only wait and fail again."""


@dataclass(frozen=True, slots=True)
class Request:
    """One call: which op, its parameters, and where its frames are (never the pixels)."""

    module: str
    qualname: str
    params: Mapping[str, Any]
    drawn: Mapping[str, Any]
    frames_in: tuple[str, tuple[int, ...], str]  # shared memory name, shape, dtype
    frames_out: tuple[str, tuple[int, ...], str]


def check_isolation(op_type: type[OpType]) -> None:
    """Raise ValueError where an op class cannot run as declared (at registration)."""
    isolation = getattr(op_type, "isolation", "thread")
    if isolation not in ISOLATIONS:
        raise ValueError(f"{op_type.__qualname__}.isolation must be one of {ISOLATIONS}, "
                         f"got {isolation!r}")
    timeout = getattr(op_type, "timeout_s", None)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"{op_type.__qualname__}.timeout_s must be a positive number of "
                         f"seconds, got {timeout!r}")
    if isolation == "process" and (op_type.__module__ == "__main__"
                                   or "<locals>" in op_type.__qualname__):
        raise ValueError(f"{op_type.__qualname__} runs in a worker process, which imports it: "
                         "define it at the top level of an importable module")


def _out_shape(op: OpType, params: Mapping[str, Any], clip: np.ndarray) -> tuple[tuple, str]:
    frames, height, width, channels = clip.shape
    shape = op.output_shape(params, FrameShape(height, width, str(clip.dtype)))
    if shape.height is None or shape.width is None:
        raise IsolatedOpError(f"{op.name}: output_shape gave no size for a {height}x{width} frame")
    return (op.output_frames(params, frames), shape.height, shape.width, channels), shape.dtype


class ProcessPool:
    """Up to `size` worker processes, started on demand; one call per worker at a time."""

    def __init__(self, size: int = POOL_PROCESSES) -> None:
        self._workers = WorkerPool(size, _start_worker,
                                   lambda: IsolatedOpError("the isolated-op pool is shut down"))
        self._lock = threading.Lock()
        self.failed = 0
        self.failures: deque[str] = deque(maxlen=KEPT_FAILURES)

    def apply(self, op: OpType, params: Mapping[str, Any], drawn: Mapping[str, Any],
              clip: list[np.ndarray]) -> list[np.ndarray]:
        frames = np.ascontiguousarray(np.stack(clip))
        out_shape, out_dtype = _out_shape(op, params, frames)
        out_bytes = int(np.prod(out_shape)) * np.dtype(out_dtype).itemsize
        shm_in = _segment(frames.nbytes)
        try:
            shm_out = _segment(out_bytes)
            try:
                np.ndarray(frames.shape, frames.dtype, buffer=shm_in.buf)[...] = frames
                kind = type(op)
                self._call(op, Request(kind.__module__, kind.__qualname__, dict(params),
                                       dict(drawn), (shm_in.name, frames.shape, str(frames.dtype)),
                                       (shm_out.name, out_shape, out_dtype)))
                result = np.array(np.ndarray(out_shape, out_dtype, buffer=shm_out.buf))
            finally:
                _release(shm_out)
        finally:
            _release(shm_in)
        return list(result)

    def _call(self, op: OpType, request: Request) -> None:
        try:
            worker = self._workers.acquire()
        except IsolatedOpError as exc:
            raise self._fail(op, str(exc), WorkerLost) from None
        healthy = False
        try:
            try:
                worker.jobs.send(request)
            except OSError:  # it died while idle
                raise self._fail(op, f"its worker process died ({how_it_ended(worker.process)})",
                                 WorkerLost) from None
            if not worker.replies.poll(op.timeout_s):
                raise self._fail(op, f"no result within timeout_s ({op.timeout_s:g} s)",
                                 WorkerLost)
            try:
                error = worker.replies.recv()
            except (EOFError, OSError):
                raise self._fail(op, f"its worker process died ({how_it_ended(worker.process)})",
                                 WorkerLost) from None
            healthy = True
            if error is not None:
                raise self._fail(op, error)
        finally:
            self._workers.release(worker, healthy=healthy)  # dead or hung: stopped

    def _fail(self, op: OpType, reason: str,
              kind: type[IsolatedOpError] = IsolatedOpError) -> IsolatedOpError:
        message = f"isolated op {op.name}: {reason}"
        with self._lock:
            self.failed += 1
            self.failures.append(message)
        return kind(message)

    def close(self) -> None:
        self._workers.close()

    def status(self) -> dict:
        workers = self._workers
        with self._lock:
            return {"processes": workers.started, "calls": workers.uses, "failed": self.failed,
                    "workers_replaced": workers.replaced, "failures": list(self.failures)}


def segment_prefix(pid: int) -> str:
    """How the names of the segments that process `pid` creates begin."""
    return f"{SEGMENT_PREFIX}{pid}_"


def _segment(size: int) -> shared_memory.SharedMemory:
    return shared_memory.SharedMemory(f"{segment_prefix(os.getpid())}{secrets.token_hex(8)}",
                                      create=True, size=max(1, size))


def _release(shm: shared_memory.SharedMemory) -> None:
    shm.close()
    with contextlib.suppress(FileNotFoundError):
        shm.unlink()


def _start_worker() -> WorkerProcess:
    # the daemon's own import path, so the worker imports the op class as the daemon did
    worker = start_worker_process(_WORKER_CODE, sys.path)
    try:
        if worker.replies.poll(START_TIMEOUT_SECONDS) and worker.replies.recv() == _READY:
            return worker
        problem = f"did not start within {START_TIMEOUT_SECONDS:g} s"
    except (EOFError, OSError):
        problem = f"failed to start ({how_it_ended(worker.process)})"
    worker.stop()
    raise IsolatedOpError(f"an isolated-op worker process {problem}")


# -- the worker side ------------------------------------------------------------------------


def worker_main(job_fd: int, reply_fd: int) -> None:
    """Serve requests until the daemon closes the pipe; an op's exception is answered as a
    message, anything that kills the process is seen by the daemon as EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    jobs, replies = Connection(job_fd, writable=False), Connection(reply_fd, readable=False)
    ops: dict[tuple[str, str], OpType] = {}
    replies.send(_READY)
    while True:
        try:
            request = jobs.recv()
        except (EOFError, OSError):
            return
        replies.send(_serve(request, ops))


def _load_op(request: Request, ops: dict[tuple[str, str], OpType]) -> OpType:
    key = (request.module, request.qualname)
    if key not in ops:
        ops[key] = resolve(request.module, request.qualname)()
    return ops[key]


def _attach(name: str) -> mmap.mmap:
    """Map a segment the daemon created. Not SharedMemory(name): in a fresh interpreter that
    starts a resource tracker of its own, which would unlink the daemon's segments when the
    worker exits."""
    fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _serve(request: Request, ops: dict[tuple[str, str], OpType]) -> str | None:
    """None, or why the op failed."""
    try:
        op = _load_op(request, ops)
        with _attach(request.frames_in[0]) as mem_in, _attach(request.frames_out[0]) as mem_out:
            return _apply_into(op, request, mem_in, mem_out)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _apply_into(op: OpType, request: Request, mem_in: mmap.mmap,
                mem_out: mmap.mmap) -> str | None:
    """Never raises: a traceback would keep the arrays over the segments alive, and a mapping
    cannot be closed while an array uses it."""
    try:
        _apply_arrays(op, request, mem_in, mem_out)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _apply_arrays(op: OpType, request: Request, mem_in: mmap.mmap, mem_out: mmap.mmap) -> None:
    _, in_shape, in_dtype = request.frames_in
    _, out_shape, out_dtype = request.frames_out
    frames = np.ndarray(in_shape, in_dtype, buffer=mem_in)
    frames.flags.writeable = False  # ops must not modify their input
    result = np.stack(op.apply_clip(request.params, request.drawn, list(frames)))
    if result.shape != tuple(out_shape) or str(result.dtype) != out_dtype:
        raise ValueError(f"{op.name} returned {result.shape} {result.dtype}, its output_shape "
                         f"says {tuple(out_shape)} {out_dtype}")
    np.ndarray(out_shape, out_dtype, buffer=mem_out)[...] = result


# -- the daemon's pool ----------------------------------------------------------------------

_pool: ProcessPool | None = None
_pool_lock = threading.Lock()


def pool() -> ProcessPool:
    """The process's pool, created on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPool()
        return _pool


# the steps lost in the current pass: (name, params) -> why. A context variable, not a thread's:
# a pass paused between two clips may resume in another worker thread (`sched.work.JobSteps`)
_lost: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lost_steps", default=None)


@contextlib.contextmanager
def one_pass() -> Iterator[None]:
    """The calls made inside (in this context) are one decode pass: a step (op and parameters)
    whose worker died, hung or could not start is not called again in it, and its later calls
    raise WorkerLost with the same reason at once."""
    outer = _lost.get()
    _lost.set({})
    try:
        yield
    finally:
        _lost.set(outer)  # not a token's reset: a pass dropped while paused ends elsewhere


def apply_isolated(op: OpType, params: Mapping[str, Any], drawn: Mapping[str, Any],
                   clip: list[np.ndarray]) -> list[np.ndarray]:
    lost = _lost.get()
    step = (op.name, tuple(sorted(params.items())))
    if lost is not None and step in lost:
        raise WorkerLost(lost[step])
    try:
        return pool().apply(op, params, drawn, clip)
    except WorkerLost as exc:
        if lost is not None:
            lost[step] = str(exc)
        raise


def status() -> dict:
    with _pool_lock:
        current = _pool
    return current.status() if current else {"processes": 0, "calls": 0, "failed": 0,
                                             "workers_replaced": 0, "failures": []}


def shutdown() -> None:
    """Stop the workers (the daemon's teardown; a later call starts a new pool)."""
    global _pool
    with _pool_lock:
        current, _pool = _pool, None
    if current is not None:
        current.close()


atexit.register(shutdown)
