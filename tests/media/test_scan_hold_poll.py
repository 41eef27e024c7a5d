"""While a reader waits, the scan's thread sleeps: a background worker that cannot take a job
now (its pipe full, none at all) must not turn the hold into a loop of zero-timeout waits
holding the daemon's GIL against the reader
(docs/performance.md#the-background-scan-s-order-and-pace)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from sandfs.media import scan_workers
from sandfs.media.probebook import ProbeQueue
from sandfs.media.scan_workers import BACKGROUND, ProbeJob, ScanPace, ScanStopped, probe_files
from sandfs.media.types import MediaLimits

HOLD_S = 1.0


def junk_jobs(tmp_path, count: int) -> list[ProbeJob]:
    jobs = []
    for i in range(count):
        path = tmp_path / f"v{i:04d}.mp4"
        path.write_bytes(b"x" * 100)
        info = os.stat(path)
        jobs.append(ProbeJob(path.name, str(path), (info.st_dev, info.st_ino)))
    return jobs


@pytest.mark.parametrize(("stalled", "paced_from"), [
    (BACKGROUND, 1),  # a niced background worker the busy cores give no time: its pipe full
    (None, 10_000),  # a lazy scan too small for a background worker: its one worker stalled
])
def test_a_held_scan_does_not_poll_while_its_worker_cannot_take(tmp_path, monkeypatch,
                                                                 stalled, paced_from):
    queue = ProbeQueue(junk_jobs(tmp_path, 200), 0, held_every_s=0.1, held_jobs=16)
    waits, stopped = [], []
    real_wait, real_send = scan_workers.wait, scan_workers._send

    def counted_wait(objects, timeout=None):
        waits.append(timeout)
        return real_wait(objects, timeout)

    def send(worker, batch, limits):  # the worker gets no CPU from its first message on
        real_send(worker, batch, limits)
        if (stalled is None or worker.role == stalled) and not stopped:
            os.kill(worker.process.pid, signal.SIGSTOP)
            stopped.append(worker.process.pid)

    monkeypatch.setattr(scan_workers, "wait", counted_wait)
    monkeypatch.setattr(scan_workers, "_send", send)
    stop, cpu = threading.Event(), []
    pace = ScanPace(ahead_videos=0, paced_from_videos=paced_from, held_every_ms=100)

    def scan() -> None:
        began = time.thread_time()
        with pytest.raises(ScanStopped):
            probe_files(queue, MediaLimits(), 1, stop=stop, pace=pace)
        cpu.append(time.thread_time() - began)

    thread = threading.Thread(target=scan)
    try:
        with queue.readers_wait():  # a reader waits the whole time
            thread.start()
            give_up = time.monotonic() + 30  # a worker's start, on a loaded machine
            while not stopped and time.monotonic() < give_up:
                time.sleep(0.01)
            time.sleep(HOLD_S)
            waits_held = list(waits)
    finally:
        for pid in stopped:  # the scan stops them: before it waits for them to leave
            os.kill(pid, signal.SIGCONT)
        stop.set()
        thread.join(30)
        queue.close()
    assert stopped and cpu, "the worker was never sent a job"
    zero = sum(timeout == 0 for timeout in waits_held)
    # a wait a STOP_POLL_SECONDS at most: ~5 in the hold after the worker's start (itself
    # a few waits); the bug made 100,000s
    assert zero <= 3 and len(waits_held) <= 200, (zero, len(waits_held))
    assert cpu[0] < 0.5, cpu
