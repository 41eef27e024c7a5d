"""Probe worker processes: each file is probed in a fresh interpreter that is killed when it
exceeds the decode timeout (a hung decoder cannot be interrupted) and replaced when it dies (a
crashing demuxer or decoder takes only its own process down)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from threading import Event
from typing import Any, Protocol

from sandfs.media.types import MediaLimits, ProbeFailure, ProbeResult
from sandfs.workerproc import how_it_ended, start_worker_process

log = logging.getLogger(__name__)

# A start is ~0.1-0.2 s of CPU: a worker not ready by then (stuck importing from a hung file
# system) or dead before (the OOM killer) is started again; this many such starts in a row
# say it cannot start (its interpreter broken): the scan fails, saying why.
_WORKER_START_TIMEOUT_SECONDS = 30.0
START_TRIES = 3
# A killed worker is gone at once unless stuck in uninterruptible I/O (a hung network file
# system): past this, a thread of its own reaps it and the scan goes on.
KILLED_EXIT_SECONDS = 2.0
STOP_POLL_SECONDS = 0.2  # how soon a scan run in another thread sees its stop event
# A worker's start (an interpreter and PyAV, ~0.1-0.2 s of CPU) pays for itself only over this
# many probes (~4 ms each): a second one started for 16 files made `sandfs mount` 45 ms slower,
# starting beside the daemon's own imports on a 2-core machine (docs/performance.md#cold-start).
FILES_PER_WORKER = 32
WORKERS_AHEAD = 1  # started before the daemon's imports: the dataset's size is not known yet
# Jobs sent to a worker at once: the next ones wait in its pipe, so the worker never waits for
# this process to wake up and take a reply (~2.5 ms a probe here, more while the daemon
# imports). 16 short videos with a busy thread beside the scan: 96-107 ms with 4, 122-130 with
# 2, 180-190 with 1 (60 ms of probing; docs/performance.md#cold-start).
IN_FLIGHT = 4
# A job's bytes in a worker's pipe at most, past its path (a 1-job message's pickle is ~110).
# Jobs not answered take half the pipe at most, so a send never waits on a worker waiting to
# send its results (that deadlock: background_in_flight 1,000, 150-byte names).
JOB_BYTES = 160
# Who takes which jobs from a ProbeQueue (ScanPace): ANY every job (an unpaced scan), FRONT
# what is waited for and the lead, BACKGROUND the followed orders and the rest, never a job
# waited for.
ANY, FRONT, BACKGROUND = "any", "front", "background"


class JobQueue(Protocol):
    """What `probe_files` takes jobs from (probebook.ProbeQueue; a list is wrapped as one)."""

    def take(self, role: str = ANY) -> ProbeJob | None: ...
    def held_seconds(self, room: bool) -> float: ...
    def extendleft(self, jobs: Iterable[ProbeJob]) -> None: ...
    def settled(self, key: str) -> None: ...
    def __len__(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ScanPace:
    """How a lazy scan shares the CPU with decoding (docs/config.md#the-scan). Front workers
    (`workers` of them, the daemon's own priority) probe what a planning thread waits for,
    and the next `ahead_videos` of the readers' order once a wait found its video not probed
    (the readers caught up with the scan); else they idle. `background_workers` probe the
    rest, in the readers' order, at `background_nice` (os.nice): they take the CPU decoding
    leaves, so the scan still ends. Each keeps `background_in_flight` jobs in its pipe (the
    scan's thread waits for the daemon's GIL between replies). While a reader waits for a
    batch the background takes one message's jobs at most every `held_every_ms`. Paced only
    from `paced_from_videos` files to probe (fewer: every worker takes every job)."""

    ahead_videos: int = 2_048
    background_workers: int = 1
    background_nice: int = 10
    background_in_flight: int = 32
    paced_from_videos: int = 2_000
    held_every_ms: int = 100

    def __post_init__(self) -> None:
        for name, (least, most) in PACE_BOUNDS.items():
            value = getattr(self, name)
            if value < least or (most is not None and value > most):
                raise ValueError(f"scan {name} must be {least} to {most}, not {value}"
                                 if most is not None else
                                 f"scan {name} must be >= {least}, not {value}")

    @property
    def held_every_s(self) -> float:
        """`held_every_ms` in seconds; inf past a float's range (the share is off)."""
        try:
            return self.held_every_ms / 1000
        except OverflowError:
            return math.inf


# Each ScanPace field's (least, most) value; the config reads the same bounds.
PACE_BOUNDS: dict[str, tuple[int, int | None]] = {
    "ahead_videos": (0, None), "background_workers": (1, None), "background_nice": (0, 19),
    "background_in_flight": (1, None), "paced_from_videos": (1, None),
    "held_every_ms": (1, None)}


DEFAULT_PACE = ScanPace()


class Waker:
    """A pipe another thread pokes so that `probe_files`' wait returns at once (a job is
    waited for while every worker is idle or busy with background jobs)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()  # no poke of a closed descriptor's number reused
        self._closed = False

    def fileno(self) -> int:
        return self._read

    def poke(self) -> None:
        with self._lock, contextlib.suppress(BlockingIOError):  # full: readable already
            if not self._closed:
                os.write(self._write, b"!")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 4096)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._write)
                os.close(self._read)


class ScanStopped(Exception):
    """The scan's stop event was set (the daemon stops during its startup scan)."""


def check_stop(stop: Event | None) -> None:
    if stop is not None and stop.is_set():
        raise ScanStopped("the scan was stopped")


@dataclass(frozen=True, slots=True)
class ProbeJob:
    """One file to probe: `key` names its result, `identity` (st_dev, st_ino) must still match."""

    key: str
    path: str
    identity: tuple[int, int]


Answer = tuple[str, ProbeResult, str | None]  # a job's key, result and scan index text


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes]
    jobs: Connection  # parent -> worker
    replies: Connection  # worker -> parent
    started: float
    ready: bool = False
    sent: deque[ProbeJob] = field(default_factory=deque)  # in order; the first is probed now
    messages: deque[int] = field(default_factory=deque)  # jobs of each message not answered
    alone: deque[ProbeJob] = field(default_factory=deque)  # to send one a message first
    deadline: float = 0.0  # the first's
    timeout_seconds: float = 0.0
    role: str = ANY  # which jobs it takes (ScanPace)
    in_flight: int = IN_FLIGHT
    nice: int = 0
    pipe_bytes: int = 4096  # its job pipe's size
    sent_bytes: int = 0  # what the jobs in `sent` take of it (JOB_BYTES)
    failed: bool = False  # died or timed out: replaced
    starts: int = 1  # tries in a row that started it (one that died starting counts on)
    why: str = ""  # how it failed, for the log


class ProbeWorkers:
    """Probe worker processes started ahead of the scan that takes them: a daemon starts them
    before its own imports and its mount, so their interpreters start on another core
    meanwhile (each takes ~0.2 s, longer than probing a few dozen short videos). Whatever no
    scan took is stopped by `close` (idempotent; also on leaving the `with` block)."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()  # a lazy scan takes them in its own thread
        self._idle: list[_Worker] = []
        try:
            for _ in range(count):
                self._idle.append(_start_worker())
        except BaseException:
            self.close()
            raise

    def take(self, count: int) -> list[_Worker]:
        """Up to `count` idle workers (the caller starts the rest)."""
        with self._lock:
            taken, self._idle = self._idle[:count], self._idle[count:]
        return taken

    def hand_over(self, count: int) -> ProbeWorkers:
        """Up to `count` idle workers moved to a holder of their own (a scan going on in
        another thread, after this one is closed)."""
        other = ProbeWorkers(0)
        with self._lock:
            other._idle, self._idle = self._idle[:count], self._idle[count:]
        return other

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            _stop_worker(worker)

    def __enter__(self) -> ProbeWorkers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def probe_files(
    jobs: list[ProbeJob] | JobQueue,
    limits: MediaLimits,
    workers: int,
    on_result: Callable[[str, ProbeResult], None] | None = None,
    stop: Event | None = None,
    started: ProbeWorkers | None = None,
    pace: ScanPace | None = None,
    texts: MutableMapping[str, Any] | None = None,
) -> dict[str, ProbeResult]:
    """Probes `jobs` (a list, or a queue other threads reorder), up to `workers` at once,
    each in a worker process that is killed when a probe exceeds limits.decode_timeout_seconds;
    key -> result, or `on_result(key, result)` for each as it arrives (completion order),
    nothing kept then (a scan's results held ~670 bytes a video to its end). Once `stop` is
    set, raises ScanStopped within STOP_POLL_SECONDS, busy workers killed. `started`: workers
    started ahead, used first. `pace`: a queue's jobs shared out as ScanPace says. `texts`:
    each usable video's index text goes in here as its worker made it, before `on_result`."""
    if not jobs:
        return {}
    pending: JobQueue = _Listed(jobs) if isinstance(jobs, list) else jobs
    results: dict[str, ProbeResult] = {}
    answered: set[str] = set()  # the jobs' own keys
    deliver = on_result or results.__setitem__
    pool: list[_Worker] = []  # filled inside the try: a failed start stops those started
    waker = getattr(pending, "waker", None)  # readable when a job is waited for
    try:
        _fill_pool(pool, len(jobs), workers, started,
                   pace if pace is not None and len(jobs) >= pace.paced_from_videos else None)
        while len(pending) or any(w.sent or w.alone for w in pool):
            for worker in pool:
                _top_up(worker, pending, limits)
            room = any(w.role == BACKGROUND and _has_room(w) for w in pool)
            timeout = min(_wait_seconds(pool), pending.held_seconds(room))
            ready = wait([*(w.replies for w in pool), *([waker] if waker else [])],
                         timeout if stop is None else min(timeout, STOP_POLL_SECONDS))
            if waker in ready:
                waker.drain()
            check_stop(stop)
            for position, worker in enumerate(pool):
                for key, result, text in _poll_worker(worker, worker.replies in ready):
                    pending.settled(key)
                    if key not in answered:  # a job sent twice: the first result wins
                        answered.add(key)
                        if texts is not None and text is not None:
                            texts[key] = text
                        deliver(key, result)
                if worker.failed:
                    pool[position] = _replace(worker, pending, answered)
    finally:
        for worker in pool:
            _stop_worker(worker)
    return results


class _Listed(deque):
    """A list of jobs as a JobQueue: every worker takes any."""

    def take(self, role: str = ANY) -> ProbeJob | None:
        return self.popleft() if self else None

    def settled(self, key: str) -> None:
        pass

    def held_seconds(self, room: bool) -> float:
        return math.inf


def _fill_pool(pool: list[_Worker], count: int, workers: int, started: ProbeWorkers | None,
               pace: ScanPace | None) -> None:
    """The front workers (those started ahead first), and with `pace` the background ones,
    appended as each starts."""
    count = max(1, min(workers, -(-count // FILES_PER_WORKER)))
    pool += [] if started is None else started.take(count)
    while len(pool) < count:
        pool.append(_start_worker())
    if pace is None:
        return
    for worker in pool:
        worker.role = FRONT
    for _ in range(pace.background_workers):
        pool.append(_start_worker(pace.background_nice, pace.background_in_flight))
        pool[-1].role = BACKGROUND


def _replace(worker: _Worker, pending: JobQueue, answered: set[str]) -> _Worker:
    """A fresh worker for one that died or timed out. The jobs of the message it was on, if
    more than one is left (it may have held results of some when it failed, none blamed), go
    to the fresh one one a message, so that only a job that fails alone is blamed; the others
    (not started, or a background worker's) are queued again."""
    sent, on = list(worker.sent), worker.messages[0] if worker.messages else 0
    split = on if on > 1 and worker.role != BACKGROUND else 0  # a background's: to the front
    suspects = [job for job in sent[:split] if job.key not in answered]
    again = [job for job in sent[split:] if job.key not in answered]
    pending.extendleft(reversed(again))
    log.warning("probe worker %d (%s) %s: killed and replaced, %d videos sent again",
                worker.process.pid, worker.role, worker.why, len(suspects) + len(again))
    worker.sent.clear()
    _stop_worker(worker)  # failed: killed, never waited for as an idle one is
    fresh = _start_like(worker)
    fresh.alone.extend(worker.alone)
    fresh.alone.extendleft(reversed(suspects))
    return fresh


def _top_up(worker: _Worker, pending: JobQueue, limits: MediaLimits) -> None:
    """Up to its `in_flight` jobs, sent half at a time (one write, one wake-up a message): the
    next message waits in its pipe while it probes this one. Its `alone` ones first, one a
    message."""
    half = max(1, worker.in_flight // 2)
    while (_can_send(worker) and worker.alone and len(worker.sent) < worker.in_flight
           and (not worker.sent or _pipe_room(worker) > 0)):
        _send(worker, [worker.alone.popleft()], limits)
    while _has_room(worker):
        batch, room = [], _pipe_room(worker)
        while (len(batch) < half and (room > 0 or not batch)
               and (job := pending.take(worker.role)) is not None):
            batch.append(job)
            room -= _job_bytes(job)
        if not batch:
            return
        _send(worker, batch, limits)


def _has_room(worker: _Worker) -> bool:
    """May it be sent a message of jobs taken from the queue now?"""
    return (_can_send(worker) and not worker.alone
            and (not worker.sent or _pipe_room(worker) > 0)
            and len(worker.sent) + max(1, worker.in_flight // 2) <= worker.in_flight)


def _pipe_room(worker: _Worker) -> int:
    """Bytes of jobs it may be sent now: half its pipe less those not answered (a job at
    least, to one that has none: idle, it reads a message of any size)."""
    return worker.pipe_bytes // 2 - worker.sent_bytes


def _job_bytes(job: ProbeJob) -> int:
    return len(job.path.encode(errors="surrogateescape")) + JOB_BYTES


def _can_send(worker: _Worker) -> bool:
    return worker.ready and not worker.failed


def _send(worker: _Worker, batch: list[ProbeJob], limits: MediaLimits) -> None:
    """The batch into the worker's pipe. One that died since its last reply was read (the OOM
    killer) breaks the pipe: it is replaced, the batch with its other jobs."""
    if not worker.sent:
        worker.deadline = time.monotonic() + limits.decode_timeout_seconds
    worker.sent.extend(batch)
    worker.sent_bytes += sum(map(_job_bytes, batch))
    worker.messages.append(len(batch))
    worker.timeout_seconds = limits.decode_timeout_seconds
    try:
        worker.jobs.send((limits, [(job.path, job.identity) for job in batch]))
    except OSError as error:
        worker.failed, worker.why = True, f"could not be sent jobs ({error.strerror})"


def _start_worker(nice: int = 0, in_flight: int = IN_FLIGHT) -> _Worker:
    """A fresh interpreter that probes what it is sent (see `sandfs.workerproc`), at `nice`."""
    worker = start_worker_process(_WORKER_CODE.format(nice=nice))
    return _Worker(worker.process, worker.jobs, worker.replies, started=time.monotonic(),
                   in_flight=in_flight, nice=nice,
                   pipe_bytes=fcntl.fcntl(worker.jobs.fileno(), fcntl.F_GETPIPE_SZ))


def _start_like(worker: _Worker) -> _Worker:
    fresh = _start_worker(worker.nice, worker.in_flight)
    fresh.role = worker.role
    fresh.starts = 1 if worker.ready else worker.starts + 1
    return fresh


def _wait_seconds(pool: list[_Worker]) -> float:
    deadlines = [w.deadline for w in pool if w.sent]
    deadlines += [w.started + _WORKER_START_TIMEOUT_SECONDS for w in pool if not w.ready]
    if not deadlines:  # every worker idle, jobs left (the background holds): poll
        return STOP_POLL_SECONDS
    return max(0.0, min(deadlines) - time.monotonic())


def _poll_worker(worker: _Worker, readable: bool) -> list[Answer]:
    """The replies that came (`readable`: its pipe is), every one waiting: (key, result, its
    index text or None) of each job answered, timed out or died. Sets `worker.failed` when it
    died or timed out (replace it; the jobs not answered are still in `sent`)."""
    answered = []
    try:
        while readable and worker.replies.poll():
            message = worker.replies.recv()
            if isinstance(message, str):  # probe_worker.WORKER_READY
                worker.ready = True
            else:
                answered += [_answer(worker, *reply) for reply in message if worker.sent]
    except (EOFError, OSError):
        ended = how_it_ended(worker.process)  # closed its pipe: it is leaving (1 s at most)
        if not worker.ready:
            return answered + _start_failed(worker, f"died starting ({ended})")
        died = "closed its pipe, still running" if ended == "still running" else f"died ({ended})"
        return answered + _failed(worker, "open_invalid", f"the decoder process {died}")
    now = time.monotonic()
    if worker.sent and now >= worker.deadline:
        return answered + _failed(worker, "decode_timeout", "no result within "
                                  f"decode_timeout_seconds ({worker.timeout_seconds} s)")
    if not worker.ready and now >= worker.started + _WORKER_START_TIMEOUT_SECONDS:
        return answered + _start_failed(
            worker, f"did not start within {_WORKER_START_TIMEOUT_SECONDS:g} s")
    return answered


def _start_failed(worker: _Worker, why: str) -> list[Answer]:
    """None: the worker is replaced, unless it was the START_TRIES-th start in a row."""
    if worker.starts >= START_TRIES:
        raise RuntimeError(f"a probe worker process failed to start {worker.starts} times "
                           f"in a row, the last {why}")
    worker.failed, worker.why = True, why
    return []


def _failed(worker: _Worker, reason: str, detail: str) -> list[Answer]:
    """The job the worker was on, failed, when that is known: the last one left of its message
    (a worker replies to a message once done with it, so it held no result of it). None from
    a background worker: it may only have been starved of CPU at its nice."""
    worker.failed = True
    worker.why = detail + (f" on {worker.sent[0].key!a}" if worker.sent else "")
    if not worker.sent or worker.role == BACKGROUND or worker.messages[0] > 1:
        return []
    return [_answer(worker, ProbeFailure(reason, detail, lasting=False))]


def _answer(worker: _Worker, result: ProbeResult, text: str | None = None) -> Answer:
    """The result of the job the worker was on; the next one starts now."""
    job = worker.sent.popleft()
    worker.sent_bytes -= _job_bytes(job)
    worker.messages[0] -= 1
    if not worker.messages[0]:
        worker.messages.popleft()
    worker.deadline = time.monotonic() + worker.timeout_seconds
    return job.key, result, text


def _stop_worker(worker: _Worker) -> None:
    """An idle worker is told to leave and given 2 s; one busy, failed (it may hang in a
    probe) or not started yet is killed at once."""
    if (worker.process.poll() is None and worker.ready and not worker.sent
            and not worker.failed):
        with contextlib.suppress(OSError):
            worker.jobs.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=2.0)
    if worker.process.poll() is None:
        worker.process.kill()
    _reap(worker.process)
    worker.jobs.close()
    worker.replies.close()


def _reap(process: subprocess.Popen[bytes]) -> None:
    """Waits KILLED_EXIT_SECONDS at most for a killed worker's exit, then leaves it to a
    thread: the scan never waits on a process that SIGKILL cannot end yet."""
    try:
        process.wait(timeout=KILLED_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        log.warning("probe worker %d did not exit %g s after SIGKILL (stuck in I/O?): "
                    "reaped when it does", process.pid, KILLED_EXIT_SECONDS)
        threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()


# Done, the worker leaves without the interpreter's teardown: unloading PyAV and numpy took
# 15 ms that the scan waited for (3.4 ms now).
_WORKER_CODE = (
    "import os, sys; from sandfs.media.probe_worker import worker_main; "
    "worker_main(int(sys.argv[1]), int(sys.argv[2]), {nice}); os._exit(0)"
)
