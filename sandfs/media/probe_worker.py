"""A probe worker process's side (scan_workers starts it): probes what it is sent, one
interpreter a worker, and sends the results back a list at a time."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from multiprocessing.connection import Connection
from threading import Event

from sandfs.faults import fault_point
from sandfs.media.types import MediaLimits, ProbeFacts, ProbeFailure, ProbeResult

WORKER_READY = "ready"  # its first message: started, PyAV to import still
# A worker's results go back a list at a time, at most this long after the first (a timer in
# the worker, never held behind its next probe): one write and one wake-up of the scan's
# thread for a run of short probes. One each cost the lazy scan's thread 74 % more CPU a
# video (docs/performance.md#the-background-scan-s-order-and-pace).
REPLY_EVERY_SECONDS = 0.02


def worker_main(job_fd: int, reply_fd: int, nice: int = 0) -> None:
    """The worker process's loop: (limits, [(path, identity), ...]) in, (a ProbeResult, a
    video's scan index text or None) for each out, in order, in lists: at the message's end,
    or REPLY_EVERY_SECONDS after a result (a timer: never held behind the next probe); None
    or a closed pipe (the parent is gone) ends it. `nice`: added to its priority first (a
    background worker's)."""
    if nice:
        os.nice(nice)
        fault_point("background_scan")  # tests hold the background scan (sleep) this way
    # here, not at the top: the daemon starts its workers before it imports PyAV (25 ms)
    from sandfs.media.opening import describe_error
    from sandfs.media.probe import probe_video
    from sandfs.media.resulttext import result_text

    jobs = Connection(job_fd, writable=False)
    replies = _Replies(Connection(reply_fd, readable=False))
    replies.connection.send(WORKER_READY)
    while True:
        try:
            message = jobs.recv()
        except EOFError:
            return
        if message is None:
            return
        limits, batch = message
        for path, identity in batch:
            started = time.monotonic()
            try:
                done = probe_video(path, limits, identity)
            except Exception as error:  # a reply must always come back
                done = ProbeFailure("open_invalid", f"probe failed: {describe_error(error)}")
            done = _timed(done, time.monotonic() - started, limits, nice)
            replies.hold((done, result_text(done) if isinstance(done, ProbeFacts) else None))
        replies.flush()


def _timed(done: ProbeResult, seconds: float, limits: MediaLimits, nice: int) -> ProbeResult:
    """A front worker's probe that ran past the timeout is a decode_timeout, as if killed: the
    scan's thread may look late (a busy machine) and would take it. A background worker's
    is kept: its time is what decoding left it."""
    if nice or isinstance(done, ProbeFailure) or seconds <= limits.decode_timeout_seconds:
        return done
    return ProbeFailure("decode_timeout", f"the probe took {seconds:.2f} s, over "
                        f"decode_timeout_seconds ({limits.decode_timeout_seconds} s)",
                        lasting=False)


class _Replies:
    """A worker's results held for one write, sent REPLY_EVERY_SECONDS after the first by a
    thread (a probe in Python code yields the GIL to it) or at the message's end."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._held: list[tuple[ProbeResult, str | None]] = []
        self._lock = threading.Lock()
        self._holding = Event()
        threading.Thread(target=self._flush_soon, daemon=True).start()

    def hold(self, reply: tuple[ProbeResult, str | None]) -> None:
        with self._lock:
            self._held.append(reply)
            self._holding.set()

    def flush(self) -> None:
        with self._lock:
            held, self._held = self._held, []
            self._holding.clear()
            if held:
                self.connection.send(held)

    def _flush_soon(self) -> None:
        with contextlib.suppress(OSError):  # the parent is gone: the loop ends too
            while True:
                self._holding.wait()
                time.sleep(REPLY_EVERY_SECONDS)
                self.flush()
