"""The daemon's side of job worker processes (`engine: execution: processes`): `workers`
of them started ahead, up to twice as many on demand (for paused passes), one job each at a
time. The job's thread in the daemon
sends the job, then only answers: it forwards the clips made to the scheduler (`report`),
calls the store for the worker, and adds its counters; it holds the GIL for a message, not
for a frame. A worker that dies mid-job fails that job (WorkerLost: its batches read EIO)
and is replaced on the next; the other jobs and workers go on."""

from __future__ import annotations

import contextlib
import math
import os
import select
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial

import numpy as np

from sandfs import ops as oplib
from sandfs.execution import shm
from sandfs.execution.channel import Channel, ChannelClosed
from sandfs.execution.worker import ASK, READY, RESUME, JobRequest
from sandfs.media.opening import open_regular_file
from sandfs.plan.window import VideoWork, ViewKey
from sandfs.sched.jobs import Failed, JobResult, Placed, VideoJob
from sandfs.sched.work import Tools
from sandfs.workerproc import SocketWorker, WorkerPool, how_it_ended, start_socket_worker

START_TIMEOUT_SECONDS = 60.0
_WORKER_CODE = ("import sys; from sandfs.execution.worker import worker_main; "
                "worker_main(int(sys.argv[1]))")


class WorkerLost(RuntimeError):
    """A job's worker process died (or could not start): the job fails, the daemon goes on."""


class JobPool:
    """`workers` worker processes run passes at a time; as many more hold passes paused
    (`sched.passes`: at most one a worker), so a pause frees a worker for a new job."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        # open while a reader is blocked or expected: the workers' passes ask whether to
        # pause (docs/design.md#pausing-a-pass-in-a-worker); written by the scheduler alone
        self._gate = shm.shared_empty(1)
        self._workers = WorkerPool(2 * workers, partial(_start_worker, shm.locate(self._gate)[0]),
                                   lambda: WorkerLost("the job worker pool is shut down"),
                                   stopped=self._forget_scratch)
        self._lock = threading.Lock()
        self._scratch: dict[int, int] = {}  # worker pid -> bytes of its scratch memfd

    def steps(self, tools: Tools, job: VideoJob, targets: Mapping[ViewKey, np.ndarray],
              report: Callable[[JobResult], None]) -> ProcessSteps:
        """`sched.work.video_steps` in a worker process: its batches filled in place, its
        clips reported as they are made, its result (frames carried included)."""
        return ProcessSteps(self, tools, job, targets, report)

    def warm(self) -> None:
        """Start a worker ahead of the first jobs (one call, one worker; `workers` calls at
        most start one each)."""
        if self._workers.started < self.workers:
            self._workers.warm()

    def gate_pauses(self, readers_blocked: bool) -> None:
        """Open the gate (passes ask at each clip's end whether to pause), or close it."""
        self._gate[0] = readers_blocked

    def acquire(self) -> SocketWorker:
        return self._workers.acquire()

    def release(self, worker: SocketWorker, *, healthy: bool) -> None:
        """Unhealthy (dead, or stopped mid-job): it is stopped and replaced."""
        self._workers.release(worker, healthy=healthy)

    def note_scratch(self, pid: int, nbytes: int) -> None:
        with self._lock:
            self._scratch[pid] = nbytes

    def shared_bytes(self) -> int:
        """Shared memory the workers hold beside batch buffers and carried frames (their
        scratch, where a clip goes to the store through): for the memory ledger."""
        with self._lock:
            return sum(self._scratch.values())

    def _forget_scratch(self, worker: SocketWorker) -> None:
        with self._lock:  # a worker stopped: its scratch went with it
            self._scratch.pop(worker.process.pid, None)

    def close(self) -> None:
        self._workers.close()


class ProcessSteps:
    """One job on one worker, from the daemon's side, as `sched.work.JobSteps` is in a
    thread: run until it ends or pauses; paused, the worker keeps its decoder and frames,
    and the next `run` (from any thread) resumes it there."""

    def __init__(self, pool: JobPool, tools: Tools, job: VideoJob,
                 targets: Mapping[ViewKey, np.ndarray],
                 report: Callable[[JobResult], None]) -> None:
        self.pool, self.tools, self.job, self.report = pool, tools, job, report
        self.targets: Mapping[ViewKey, np.ndarray] | None = targets  # sent at the start
        self.buffers = targets  # the batches' arrays, mapped here
        self.worker: SocketWorker | None = None
        self.channel: Channel | None = None
        self.scratch: np.ndarray | None = None  # the worker's scratch, mapped here
        self.finished = False  # the worker said the job ended (done or failed): it is idle

    def run(self, pause: Callable[[], bool]) -> JobResult | None:
        """The job's result, or None where `pause()` (asked at a clip's end, while the gate is
        open) said another job should have a worker: call again to resume."""
        if self.worker is None:
            self.worker = self.pool.acquire()
            self.channel = Channel(self.worker.channel)
        paused = False
        try:
            if self.targets is not None:
                targets, self.targets = self.targets, None
                self._send_job(targets)
            else:
                self.channel.send(RESUME)
            result = self._serve(pause)
            paused = result is None
            return result
        except ChannelClosed as exc:
            ended = how_it_ended(self.worker.process)
            raise WorkerLost(f"its worker process died ({ended})") from exc
        finally:
            if not paused:
                self.pool.release(self.worker, healthy=self.finished)

    def _serve(self, pause: Callable[[], bool]) -> JobResult | None:
        while True:
            message, fds = self.channel.recv()
            kind, *rest = message
            if kind in ("done", "error"):
                self.finished = True
                self._count(rest[-1])
                if kind == "error":
                    raise rest[0]
                return self._result(rest, fds)
            if kind == ASK:  # at a clip's end, the gate open: it waits for the answer
                pausing = pause()
                self.channel.send(pausing)
                if pausing:
                    return None
                continue
            self._answer(kind, rest, fds)

    def _send_job(self, targets: Mapping[ViewKey, np.ndarray]) -> None:
        buffers, layout = [], {}
        for view, target in targets.items():
            fd, offset = shm.locate(target)
            if fd not in buffers:
                buffers.append(fd)
            layout[view] = (buffers.index(fd), offset, target.shape, target.dtype.str)
        info = self.job.work.info
        # the daemon's batch states and task plan (with its locks) stay here
        work = self.job.work
        stripped = replace(self.job, states={},
                           work=VideoWork(work.info, None, work.window, work.uses))
        has_store = self.tools.store is not None
        ops = custom_ops({op.name for use in self.job.uses for op in use.clip.ops})
        # the daemon opens the source, with its checks (docs/deploy.md#what-the-daemon-opens)
        with contextlib.ExitStack() as stack:
            try:
                source = stack.enter_context(open_regular_file(info.path, info.identity))
            except OSError as exc:  # the worker fails the job as the decoder would have
                self.channel.send(JobRequest(stripped, layout, exc, has_store, ops), buffers)
                return
            self.channel.send(JobRequest(stripped, layout, None, has_store, ops),
                              [source.fileno(), *buffers])

    def _answer(self, kind: str, rest: list, fds: list[int]) -> None:
        store = self.tools.store
        if kind == "part":
            placed, failed, counts = rest
            self._count(counts)
            done = self._decoded(placed, failed)
            for clip in done.placed:
                if clip.in_memory:
                    shm.populate(self.buffers[clip.use.view][clip.use.slot])
            self.report(done)
        elif kind == "put":
            key, shape, dtype, deadline, size = rest
            if fds:
                self.scratch = np.frombuffer(shm.attach(fds[0]), np.uint8)
                self.pool.note_scratch(self.worker.process.pid, size)
            array = self.scratch[:math.prod(shape) * np.dtype(dtype).itemsize]
            self.channel.send(bool(store.put(key, array.view(dtype).reshape(shape),
                                             deadline=deadline)))
        elif kind == "get":
            self._send_got(store.get(rest[0], mapped=True))
        elif kind == "mark_done":
            self.channel.send(store.mark_done(rest[0]))
        elif kind == "recomputed":
            store.note_recomputed(rest[0])
        else:
            raise WorkerLost(f"a job worker sent {kind!r}")

    def _send_got(self, array: np.ndarray | None) -> None:
        if array is None:
            self.channel.send(None)
            return
        fd, _ = shm.pack([array])
        try:
            self.channel.send((array.shape, array.dtype.str), [fd])
        finally:
            os.close(fd)

    def _result(self, rest: list, fds: list[int]) -> JobResult:
        placed, failed, saved, layout, _ = rest
        carried: dict[int, dict] = {}
        if layout:
            mapping = shm.attach(fds[0], private=True)
            for window, key, offset, shape, dtype in layout:
                carried.setdefault(window, {})[key] = np.ndarray(shape, dtype, buffer=mapping,
                                                                 offset=offset)
        done = self._decoded(placed, failed)
        return JobResult(done.placed, tuple(saved), carried, done.failed)

    def _decoded(self, placed: list, failed: list) -> JobResult:
        uses = self.job.uses
        return JobResult(tuple(Placed(uses[p], m, d) for p, m, d in placed),
                         failed=tuple(Failed(uses[p], reason) for p, reason in failed))

    def _count(self, counts: Mapping[str, int]) -> None:
        for name, amount in counts.items():
            self.tools.stats.add(name, amount)


def custom_ops(names: set[str]) -> tuple[tuple[str, str, str], ...]:
    """Of these steps, those a worker may not know: registered by code outside sandfs (not
    by an entry point, which a worker loads itself), as (name, module, class)."""
    found = []
    for name in sorted(names):
        kind = type(oplib.get_op(name))
        if not kind.__module__.startswith("sandfs."):
            found.append((name, kind.__module__, kind.__qualname__))
    return tuple(found)


def _start_worker(gate_fd: int) -> SocketWorker:
    # the daemon's own import path, so that custom ops import in the worker as they did here
    worker = start_socket_worker(_WORKER_CODE, sys.path)
    try:
        ready, _, _ = select.select([worker.channel], [], [], START_TIMEOUT_SECONDS)
        channel = Channel(worker.channel)
        if ready and channel.recv()[0] == READY:
            channel.send("gate", [gate_fd])
            return worker
        problem = f"did not start within {START_TIMEOUT_SECONDS:g} s"
    except ChannelClosed:
        problem = f"failed to start ({how_it_ended(worker.process)})"
    worker.stop()
    raise WorkerLost(f"a job worker process {problem}")
