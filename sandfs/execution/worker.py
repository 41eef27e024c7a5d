"""A job worker process: runs video jobs (`sched.work.video_steps`, the code the daemon's
threads run) on the batch buffers the daemon passed as memfds, and on the source the daemon
opened and passed (it opens no path itself: `media.opening.passed_sources`). What touches the
daemon's state goes back as messages: clips made (`part`), the store's calls (`put` and `get`,
the bytes through shared memory), counters, and at the end the frames carried to later
windows, packed into one memfd (`done`), or the job's exception (`error`).

Pausing (docs/design.md#pausing-a-pass-in-a-worker): at each point a pass may pause at (a
clip's end), the worker reads the pool's gate, a byte of shared memory the daemon sets while
some reader is blocked or expected; open, it asks the daemon (`ASK`) and waits for the answer,
as a job thread asks the trio loop. Paused, it waits for `RESUME`."""

from __future__ import annotations

import math
import mmap
import os
import pickle
import signal
import socket
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sandfs import ops as oplib
from sandfs.execution import shm
from sandfs.execution.channel import Channel, ChannelClosed
from sandfs.materialize import Materializer
from sandfs.media.opening import passed_sources
from sandfs.plan.window import ViewKey
from sandfs.runtime import keep_freed_memory
from sandfs.sched.jobs import JobResult, VideoJob
from sandfs.sched.work import BACKGROUND_NICE, JobSteps, Tools, video_steps
from sandfs.workerproc import exit_when_orphaned, resolve

READY = "ready"  # then the daemon sends the pool's gate (one descriptor)
ASK, RESUME = "pause?", "resume"


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A video job for a worker; the descriptors travel beside it: the source's first (unless
    `source_error`), then the batch buffers' (`targets` index them from 0)."""

    job: VideoJob  # without its `states` (the daemon's)
    targets: Mapping[ViewKey, tuple[int, int, tuple[int, ...], str]]  # buffer, offset, shape, dtype
    source_error: OSError | None
    has_store: bool
    # steps registered in the daemon's code rather than by entry point: (name, module, class)
    ops: tuple[tuple[str, str, str], ...] = ()


class Tally:
    """The counters a job adds (`Stats.add`), sent to the daemon with each message."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, name: str, amount: int = 1) -> None:
        self.counts[name] += amount

    def take(self) -> dict[str, int]:
        counts, self.counts = dict(self.counts), Counter()
        return counts


class RemoteStore:
    """The daemon's store as a pass uses it: each call a round trip; an array put goes
    through this worker's scratch memfd, an array got comes in one the daemon made."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.scratch: tuple[int, mmap.mmap] | None = None  # (fd, mapping)
        self.shown = False  # the daemon has this job's scratch

    def put(self, key, array: np.ndarray, *, deadline: float = math.inf) -> bool:
        fd, mapping = self._scratch(array.nbytes)
        np.ndarray(array.shape, array.dtype, buffer=mapping)[...] = array
        fds = [] if self.shown else [fd]
        self.shown = True
        self.channel.send(("put", key, array.shape, array.dtype.str, deadline, len(mapping)), fds)
        return self._reply()

    def get(self, key, *, mapped: bool = False) -> np.ndarray | None:
        self.channel.send(("get", key))
        layout, fds = self.channel.recv()
        if layout is None:
            return None
        shape, dtype = layout
        return np.ndarray(shape, dtype, buffer=shm.attach(fds[0], private=True))

    def mark_done(self, key) -> bool:
        self.channel.send(("mark_done", key))
        return self._reply()

    def note_recomputed(self, count: int = 1) -> None:
        self.channel.send(("recomputed", count))

    def _reply(self) -> Any:
        return self.channel.recv()[0]

    def _scratch(self, nbytes: int) -> tuple[int, mmap.mmap]:
        if self.scratch is None or len(self.scratch[1]) < nbytes:
            if self.scratch is not None:
                os.close(self.scratch[0])
            fd = os.memfd_create(shm.NAME, os.MFD_CLOEXEC)
            size = max(nbytes, 1 << 20)
            os.ftruncate(fd, size)
            self.scratch, self.shown = (fd, mmap.mmap(fd, size)), False
        return self.scratch


class PauseAsker:
    """Whether a pass should pause at this point: asked of the daemon only while its gate is
    open (a read of shared memory otherwise, as a job thread reads whether any reader is
    blocked before asking the trio loop)."""

    def __init__(self, channel: Channel, gate: np.ndarray) -> None:
        self.channel, self.gate = channel, gate

    def __call__(self) -> bool:
        if not self.gate[0]:
            return False
        self.channel.send((ASK,))
        return bool(self.channel.recv()[0])


def worker_main(fd: int) -> None:
    """Serve jobs until the daemon closes the channel."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    os.nice(BACKGROUND_NICE)  # as the daemon's job threads: FUSE and trainers first
    keep_freed_memory()  # as the daemon does (the `sandfs` command): frames reuse pages
    channel = Channel(socket.socket(fileno=fd))
    channel.send(READY)
    try:
        _, (gate_fd,) = channel.recv()
        pause = PauseAsker(channel, np.frombuffer(shm.attach(gate_fd), np.uint8))
        store = RemoteStore(channel)
        while True:
            request, fds = channel.recv()
            _serve(channel, store, pause, request, fds)
    except ChannelClosed:  # the daemon stopped us (between jobs or mid-job), or died
        return


def _register_ops(ops: tuple[tuple[str, str, str], ...]) -> None:
    """Register the custom steps the daemon registered in code, importing them as it did."""
    known = set(oplib.op_names())  # each call loads the entry points
    for name, module, qualname in ops:
        if name in known:
            continue
        found = resolve(module, qualname)
        known = set(oplib.op_names())
        if name not in known:  # the import may have registered it
            oplib.register_op(found)
            known.add(name)


def _serve(channel: Channel, store: RemoteStore, pause: PauseAsker, request: JobRequest,
           fds: list[int]) -> None:
    tally = Tally()
    source = request.source_error if request.source_error is not None else fds.pop(0)
    mappings = [shm.attach(fd) for fd in fds]
    targets = {view: np.ndarray(shape, dtype, buffer=mappings[index], offset=offset)
               for view, (index, offset, shape, dtype) in request.targets.items()}
    job = request.job
    positions = {id(use): p for p, use in enumerate(job.uses)}
    store.shown = False

    def report(part: JobResult) -> None:
        channel.send(("part", *_encoded(part, positions), tally.take()))

    tools = Tools(Materializer(tally), store if request.has_store else None, tally)
    try:
        _register_ops(request.ops)
        with passed_sources({job.work.info.path: source}):
            steps = JobSteps(video_steps(tools, job, targets, report))
            while (result := steps.run(pause)) is None:  # it waits, decoder and frames kept
                if channel.recv()[0] != RESUME:
                    raise RuntimeError("a paused job worker was not resumed")
    except ChannelClosed:
        raise
    except Exception as exc:
        channel.send(("error", _portable(exc), tally.take()))
        return
    finally:
        if isinstance(source, int):
            os.close(source)
        del targets
    _send_done(channel, result, positions, tally)


def _send_done(channel: Channel, result: JobResult, positions: Mapping[int, int],
               tally: Tally) -> None:
    """The job's last clips, and the frames it carries packed into one memfd."""
    carried = [(window, key, frame) for window, frames in result.carried.items()
               for key, frame in frames.items()]
    fds, layout = [], []
    if carried:
        fd, offsets = shm.pack([frame for _, _, frame in carried])
        fds = [fd]
        layout = [(window, key, offset, frame.shape, frame.dtype.str)
                  for (window, key, frame), offset in zip(carried, offsets, strict=True)]
    try:
        channel.send(("done", *_encoded(result, positions), result.saved, layout,
                      tally.take()), fds)
    finally:
        for fd in fds:
            os.close(fd)


def _encoded(part: JobResult, positions: Mapping[int, int]) -> tuple[list, list]:
    """Clips by their position in the job (the daemon has the job's uses)."""
    return ([(positions[id(p.use)], p.in_memory, p.on_disk) for p in part.placed],
            [(positions[id(f.use)], f.reason) for f in part.failed])


def _portable(exc: Exception) -> Exception | AsBuilt:
    """What to send for the job's exception: the exception itself when it survives pickling;
    else the same type and message rebuilt without its `__init__` (`DecodeError` takes other
    arguments than its message), so the daemon's reason reads as a thread's; else a
    RuntimeError that says the same."""
    for sent in (exc, AsBuilt(exc)):
        try:
            pickle.loads(pickle.dumps(sent))
        except Exception:
            continue
        return sent
    return RuntimeError(f"{type(exc).__name__}: {exc}")


class AsBuilt:
    """Pickles as the exception it holds, unpickled by setting its args and attributes."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __reduce__(self):
        exc = self.exc
        return _rebuilt, (type(exc), exc.args, dict(getattr(exc, "__dict__", {})))


def _rebuilt(kind: type[Exception], args: tuple, attributes: dict) -> Exception:
    exc = kind.__new__(kind, *args)
    exc.args = args
    exc.__dict__.update(attributes)
    return exc
