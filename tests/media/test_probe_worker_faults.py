"""A probe worker that hangs, dies between its replies, or outlives SIGKILL never stops the
scan: it is killed without a wait, replaced, its videos sent again, and the log says so."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

import pytest

from sandfs.media import scan_workers
from sandfs.media.probebook import ProbeQueue
from sandfs.media.scan_workers import ProbeJob, ScanPace, probe_files
from sandfs.media.types import MediaLimits, ProbeFacts, ProbeFailure
from tests.helpers.probing import copies, patch_probe
from tests.helpers.processes import children_of


def timed_stops(monkeypatch) -> list[tuple[bool, float]]:
    """(failed, seconds) of each worker stop from here on."""
    stops: list[tuple[bool, float]] = []
    real = scan_workers._stop_worker

    def stop(worker):
        started = time.monotonic()
        real(worker)
        stops.append((worker.failed, time.monotonic() - started))

    monkeypatch.setattr(scan_workers, "_stop_worker", stop)
    return stops


def test_a_worker_hung_in_a_probe_is_killed_at_once(tmp_path, dataset_dir, monkeypatch,
                                                    caplog):
    """v01 hangs (in its worker, past the 0.5 s timeout): the scan's thread kills that
    worker at once, with no grace an idle worker gets to leave (2 s it spent waiting on a
    process busy in a probe), and logs which video it hung on."""
    jobs = copies(tmp_path, dataset_dir, 3)
    patch_probe(monkeypatch, "path.endswith('v01.mp4')", "time.sleep(60)")
    stops, before = timed_stops(monkeypatch), children_of()
    with caplog.at_level(logging.WARNING, logger=scan_workers.__name__):
        results = probe_files(jobs, MediaLimits(decode_timeout_seconds=0.5), workers=1)
    failed = {key: r.reason for key, r in results.items() if isinstance(r, ProbeFailure)}
    assert failed == {"v01.mp4": "decode_timeout"}
    hung = [seconds for was_failed, seconds in stops if was_failed]
    assert len(hung) == 1 and hung[0] < 1.0, stops
    (line,) = [r.getMessage() for r in caplog.records if "replaced" in r.getMessage()]
    assert "no result within decode_timeout_seconds (0.5 s) on 'v01.mp4'" in line, line
    assert children_of() <= before


def zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_worker_killed_before_its_next_jobs_are_sent_is_replaced(tmp_path, dataset_dir,
                                                                   monkeypatch):
    """The OOM killer ends the worker while the scan's thread is busy with a result: the
    next jobs meet a broken pipe before its end is read. The worker is replaced and every
    video probed, none blamed (the pipe broke, the scan went on)."""
    jobs = copies(tmp_path, dataset_dir, 3 * scan_workers.IN_FLIGHT)
    before, killed, results = children_of(), [], {}

    def kill_after_the_first(key, result):
        results[key] = result
        if killed:
            return
        killed.extend(children_of() - before)
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not all(map(zombie, killed)) and time.monotonic() < deadline:
            time.sleep(0.01)

    probe_files(jobs, MediaLimits(), workers=1, on_result=kill_after_the_first)
    assert len(killed) == 1 and set(results) == {job.key for job in jobs}
    assert all(isinstance(r, ProbeFacts) for r in results.values()), results
    assert children_of() <= before


def test_a_killed_worker_that_does_not_exit_is_left_to_a_thread(monkeypatch, caplog):
    """A worker stuck in uninterruptible I/O outlives SIGKILL until the I/O ends (shown here
    by its wait timing out): the scan's thread waits KILLED_EXIT_SECONDS, not for ever, and
    a thread reaps the process once it exits."""
    monkeypatch.setattr(scan_workers, "KILLED_EXIT_SECONDS", 0.1, raising=False)
    worker = scan_workers._start_worker()
    real_wait, waits = worker.process.wait, []

    def wait(timeout=None):
        waits.append(timeout)
        if timeout is not None:
            raise subprocess.TimeoutExpired(worker.process.args, timeout)
        return real_wait()

    worker.process.wait = wait
    with caplog.at_level(logging.WARNING, logger=scan_workers.__name__):
        scan_workers._stop_worker(worker)
    assert waits[0] == 0.1
    assert f"probe worker {worker.process.pid} did not exit" in caplog.text
    deadline = time.monotonic() + 10
    while worker.process.returncode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.process.returncode == -signal.SIGKILL and waits[-1] is None



def test_a_worker_killed_while_it_starts_is_started_again(tmp_path, dataset_dir, monkeypatch,
                                                          caplog):
    """The OOM killer ends a worker before it is ready (a replacement starting, on a machine
    short of memory): it is started again, where the whole scan failed ("failed to start")."""
    jobs = copies(tmp_path, dataset_dir, 3)
    real, killed = scan_workers._start_worker, []

    def start(*args):
        worker = real(*args)
        if not killed:
            killed.append(worker.process.pid)
            worker.process.kill()
        return worker

    monkeypatch.setattr(scan_workers, "_start_worker", start)
    with caplog.at_level(logging.WARNING, logger=scan_workers.__name__):
        results = probe_files(jobs, MediaLimits(), workers=1)
    assert all(isinstance(r, ProbeFacts) for r in results.values()), results
    assert f"probe worker {killed[0]} (any) died starting (signal SIGKILL)" in caplog.text


def test_a_worker_that_cannot_start_fails_the_scan_after_a_few_tries(tmp_path, dataset_dir,
                                                                     monkeypatch):
    jobs = copies(tmp_path, dataset_dir, 1)
    monkeypatch.setattr(scan_workers, "_WORKER_CODE", "import os; os._exit(3)")
    before = children_of()
    with pytest.raises(RuntimeError, match=r"start 3 times in a row, the last died starting "
                                           r"\(exit code 3\)"):
        probe_files(jobs, MediaLimits(), workers=1)
    assert children_of() <= before


def test_a_worker_stuck_while_it_starts_is_started_again(tmp_path, dataset_dir, monkeypatch,
                                                        caplog):
    """The first worker never becomes ready (stopped, or importing from a hung file system):
    past the start timeout it is killed and started again, where the whole scan failed ("did
    not start")."""
    jobs = copies(tmp_path, dataset_dir, 3)
    stuck = tmp_path / "stuck"
    code = scan_workers._WORKER_CODE.replace("{", "{{").replace("}", "}}")
    monkeypatch.setattr(scan_workers, "_WORKER_CODE", (
        f"import os, time; p = {str(stuck)!r}; first = not os.path.exists(p); "
        f"open(p, 'a').close(); first and time.sleep(60); " + code).replace("{{nice}}", "{nice}"))
    monkeypatch.setattr(scan_workers, "_WORKER_START_TIMEOUT_SECONDS", 0.5)
    before = children_of()
    with caplog.at_level(logging.WARNING, logger=scan_workers.__name__):
        results = probe_files(jobs, MediaLimits(), workers=1)
    assert all(isinstance(r, ProbeFacts) for r in results.values()), results
    assert "(any) did not start within 0.5 s: killed and replaced" in caplog.text
    assert children_of() <= before


def test_messages_outgrowing_the_pipe_do_not_deadlock(tmp_path, dataset_dir):
    """A background_in_flight of 1,000 and 150-byte names: a message of 500 jobs outgrew the
    64 KiB job pipe, so the scan's thread waited to send it while the worker waited to send
    its results, for ever (its stop unheard). The jobs not answered take half the pipe at
    most: every video is probed."""
    source, jobs = copies(tmp_path, dataset_dir, 1)[0].path, []
    for i in range(1000):
        path = tmp_path / f"{'x' * 150}{i:04d}.mp4"
        os.link(source, path)
        jobs.append(ProbeJob(path.name, str(path), (os.stat(path).st_dev, os.stat(path).st_ino)))
    queue, stop, results = ProbeQueue(jobs), threading.Event(), {}
    pace = ScanPace(paced_from_videos=1, background_in_flight=1000)
    scan = threading.Thread(target=lambda: results.update(probe_files(
        queue, MediaLimits(), workers=1, stop=stop, pace=pace)), daemon=True)
    scan.start()
    scan.join(60)
    stop.set()
    queue.close()
    assert len(results) == len(jobs) and not scan.is_alive()
