"""Probe workers started ahead of a scan (the daemon starts them before its imports and its
mount): the scan uses them instead of starting its own, and none is left behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from sandfs.media import scan_workers
from sandfs.media.probebook import ProbeQueue
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.scan_workers import (
    ANY,
    BACKGROUND,
    FRONT,
    ProbeWorkers,
    ScanPace,
    probe_files,
)
from sandfs.media.types import MediaLimits, ProbeFacts, ProbeFailure
from tests.helpers.probing import copies, patch_probe
from tests.helpers.processes import children_of


@pytest.fixture
def counted_starts(monkeypatch) -> list[int]:
    """Counts worker processes started from here on."""
    starts: list[int] = []
    real = scan_workers._start_worker

    def start(*args):
        starts.append(1)
        return real(*args)

    monkeypatch.setattr(scan_workers, "_start_worker", start)
    return starts


def test_a_scan_takes_the_workers_started_ahead(dataset_dir, counted_starts):
    before = children_of()
    expected = scan_dataset(dataset_dir, [".mp4"], limits=MediaLimits(), workers=2)
    counted_starts.clear()
    with ProbeWorkers(2) as started:
        assert len(children_of() - before) == 2
        scan = scan_dataset(dataset_dir, [".mp4"], limits=MediaLimits(), workers=2,
                            started=started)
        assert len(counted_starts) == 2  # those of ProbeWorkers, none more
    assert scan.videos == expected.videos and scan.bad == expected.bad
    assert children_of() <= before


def test_a_scan_needing_more_workers_starts_the_rest(dataset_dir, counted_starts,
                                                     monkeypatch):
    monkeypatch.setattr(scan_workers, "FILES_PER_WORKER", 1)  # every file worth a worker
    with ProbeWorkers(1) as started:
        scan_dataset(dataset_dir, [".mp4"], limits=MediaLimits(), workers=2, started=started)
    assert len(counted_starts) == 2


def test_a_few_files_take_one_worker(dataset_dir, counted_starts):
    """A worker's start costs more than probing a few dozen files: a small dataset is probed by
    the one started ahead, whatever `workers` allows."""
    files = len(list(dataset_dir.rglob("*.mp4")))
    assert 1 < files <= scan_workers.FILES_PER_WORKER
    with ProbeWorkers(scan_workers.WORKERS_AHEAD) as started:
        scan_dataset(dataset_dir, [".mp4"], limits=MediaLimits(), workers=2, started=started)
    assert len(counted_starts) == 1


def test_workers_no_scan_took_are_stopped(tmp_path):
    before = children_of()
    started = ProbeWorkers(2)
    assert len(children_of() - before) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    scan_dataset(empty, [".mp4"], workers=2, started=started)  # nothing to probe
    started.close()
    started.close()  # twice is fine
    assert children_of() <= before


def test_a_probe_worker_starts_without_numpy():
    """The workers start while the daemon imports and mounts; numpy would be a third of their
    start, and probing demuxes without it. Starting one imports neither (the daemon starts
    its worker before it imports PyAV); the worker imports PyAV to probe."""
    code = ("import sys; from sandfs.media.probe_worker import worker_main; "
            "from sandfs.media.scan_workers import ProbeWorkers; "
            "print('numpy' in sys.modules, 'av' in sys.modules); "
            "import sandfs.media.probe; print('numpy' in sys.modules, 'av' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "False", "False", "True"]


def test_only_the_video_a_worker_died_on_is_blamed(tmp_path, dataset_dir, monkeypatch):
    """The worker dies probing v03: v03 alone fails (the process died); v02, probed just
    before in the same message, keeps its result, and every other video is probed."""
    jobs = copies(tmp_path, dataset_dir, 8)
    patch_probe(monkeypatch, "path.endswith('v03.mp4')", "os._exit(3)")
    before = children_of()
    results = probe_files(jobs, MediaLimits(), workers=1)
    failed = {key: r.detail for key, r in results.items() if isinstance(r, ProbeFailure)}
    assert failed == {"v03.mp4": "the decoder process died (exit code 3)"}
    assert set(results) == {job.key for job in jobs}
    assert children_of() <= before


def test_a_result_is_not_held_behind_a_slow_probe(tmp_path, dataset_dir, monkeypatch):
    """v00 is probed in ms, v01 takes 1.5 s in the same worker: v00's waiter has its result
    when its probe ends, not when v01's does."""
    jobs = copies(tmp_path, dataset_dir, 2)
    patch_probe(monkeypatch, "path.endswith('v01.mp4')", "time.sleep(1.5)")
    arrived: dict[str, float] = {}
    probe_files(jobs, MediaLimits(), workers=1,
                on_result=lambda key, _: arrived.setdefault(key, time.monotonic()))
    assert arrived["v01.mp4"] - arrived["v00.mp4"] > 1.0


def test_results_handed_over_are_not_held_until_the_probes_end(tmp_path, dataset_dir):
    """A scan's results go to its book as they come; the prober keeps none (a scan of 250,000
    videos held each unpickled result, its facts its own copies, ~170 MB to its end). At
    the last result, those alive are at most one worker's pipe of them."""
    jobs = copies(tmp_path, dataset_dir, 4 * scan_workers.IN_FLIGHT)
    before, taken, alive = _live_facts(), [], []

    def on_result(key, result):
        taken.append(key)
        if len(taken) == len(jobs):
            alive.append(_live_facts() - before)

    probe_files(jobs, MediaLimits(), workers=1, on_result=on_result)
    assert len(taken) == len(jobs) and 1 <= alive[0] <= scan_workers.IN_FLIGHT


def _live_facts() -> int:
    """type(), not isinstance(): that reads `__class__`, which some proxies of other
    libraries answer with a warning."""
    return sum(type(o) is ProbeFacts for o in gc.get_objects())


def test_a_probe_past_its_timeout_fails_though_the_scan_looked_late(tmp_path, dataset_dir,
                                                                     monkeypatch):
    """v01 takes 1 s against a 0.3 s timeout while the scan's thread sleeps through the
    deadline (a busy machine): its result, read late, is a decode_timeout all the same."""
    jobs = copies(tmp_path, dataset_dir, 3)
    patch_probe(monkeypatch, "path.endswith('v01.mp4')", "time.sleep(1.0)")
    monkeypatch.setattr(scan_workers, "_wait_seconds", lambda pool: 5.0)
    results = probe_files(jobs, MediaLimits(decode_timeout_seconds=0.3), workers=1)
    failed = {key: r.reason for key, r in results.items() if isinstance(r, ProbeFailure)}
    assert failed == {"v01.mp4": "decode_timeout"}
    assert not results["v01.mp4"].lasting


def test_jobs_queued_behind_a_worker_that_dies_go_to_its_replacement(tmp_path, dataset_dir,
                                                                     monkeypatch):
    """A worker holds up to IN_FLIGHT jobs: killed while on v01, v01 alone fails (the process
    died); those waiting in its pipe are probed by the next worker, none lost."""
    jobs = copies(tmp_path, dataset_dir, 3 * scan_workers.IN_FLIGHT)
    patch_probe(monkeypatch, "True", "time.sleep(0.2)")  # the kill lands mid-probe
    before, killed, results = children_of(), [], {}

    def kill_after_the_first(key, result):
        results[key] = result
        if not killed:
            killed.extend(children_of() - before)
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    probe_files(jobs, MediaLimits(), workers=1, on_result=kill_after_the_first)
    assert len(killed) == 1 and set(results) == {job.key for job in jobs}
    died = {key: r.detail for key, r in results.items() if isinstance(r, ProbeFailure)}
    assert died == {"v01.mp4": "the decoder process died (signal SIGKILL)"}
    facts = [r for r in results.values() if isinstance(r, ProbeFacts)]
    assert len(facts) == len(jobs) - 1 and all(f == facts[0] for f in facts)
    assert children_of() <= before


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


class RecordedQueue(ProbeQueue):
    """A ProbeQueue that records (role, key) of each job taken."""

    def __init__(self, jobs, **options) -> None:
        super().__init__(jobs, **options)
        self.taken: list[tuple[str, str]] = []

    def take(self, role=ANY):
        job = super().take(role)
        if job is not None:
            self.taken.append((role, job.key))
        return job


def test_a_paced_scan_probes_the_rest_in_a_niced_background_worker(tmp_path, dataset_dir,
                                                                   monkeypatch):
    """ScanPace: the front worker (the daemon's priority) idles while nothing is waited for;
    the background one, niced, probes the jobs; a job waited for (from another thread, as a
    planner waits) wakes the scan at once: it is probed by the front worker before the
    background worker's next result (its probes take 1 s each here)."""
    jobs = copies(tmp_path, dataset_dir, 6)
    patch_probe(monkeypatch, "niced", "time.sleep(1.0)")
    queue = RecordedQueue(jobs)
    before, nices, order, results = children_of(), [], [], {}

    def on_result(key, result):
        order.append(key)
        results[key] = result
        if not nices:
            nices.extend(sorted(nice_of(pid) for pid in children_of() - before))
            threading.Timer(0.2, queue.first, (["v05.mp4"],)).start()

    try:
        pace = ScanPace(paced_from_videos=1, background_nice=7, background_in_flight=2)
        probe_files(queue, MediaLimits(), workers=1, on_result=on_result, pace=pace)
    finally:
        queue.close()
    assert nices == [0, 7]
    assert order[:2] == ["v00.mp4", "v05.mp4"]
    assert queue.taken[:2] == [(BACKGROUND, "v00.mp4"), (BACKGROUND, "v01.mp4")]
    assert (FRONT, "v05.mp4") in queue.taken
    assert all(role == BACKGROUND for role, key in queue.taken if key != "v05.mp4")
    assert set(results) == {job.key for job in jobs}
    assert all(isinstance(r, ProbeFacts) for r in results.values())
    assert children_of() <= before


def test_a_background_timeout_goes_to_a_front_worker(tmp_path, dataset_dir, monkeypatch):
    """A niced worker may be starved past decode_timeout_seconds: its job is probed again by
    a front worker, not recorded bad; a front worker's timeout is (v03 hangs everywhere)."""
    jobs = copies(tmp_path, dataset_dir, 4)
    patch_probe(monkeypatch, "path.endswith('v01.mp4') and niced or path.endswith('v03.mp4')",
                "time.sleep(30)")
    queue = RecordedQueue(jobs)
    try:
        queue.first(["v03.mp4"])  # the front worker's
        pace = ScanPace(paced_from_videos=1, background_in_flight=2)
        results = probe_files(queue, MediaLimits(decode_timeout_seconds=1.5), workers=1,
                              pace=pace)
    finally:
        queue.close()
    failed = {key: r.reason for key, r in results.items() if isinstance(r, ProbeFailure)}
    assert failed == {"v03.mp4": "decode_timeout"}
    assert (BACKGROUND, "v01.mp4") in queue.taken and (FRONT, "v01.mp4") in queue.taken


def test_a_background_worker_that_fails_to_start_leaves_no_worker(tmp_path, dataset_dir,
                                                                  monkeypatch):
    jobs = copies(tmp_path, dataset_dir, 2)
    real = scan_workers._start_worker

    def start(nice=0, in_flight=scan_workers.IN_FLIGHT):
        if nice:
            raise OSError("no more processes")
        return real(nice, in_flight)

    monkeypatch.setattr(scan_workers, "_start_worker", start)
    before, queue = children_of(), ProbeQueue(jobs)
    try:
        with pytest.raises(OSError, match="no more processes"):
            probe_files(queue, MediaLimits(), workers=1, pace=ScanPace(paced_from_videos=1))
    finally:
        queue.close()
    assert children_of() <= before


def test_a_lazy_scan_that_fails_to_start_leaves_no_descriptor(dataset_dir, monkeypatch):
    """The queue's waker pipe and the workers handed over are the thread's once it starts:
    a failure before that closes them."""
    def fail(*args, **kwargs):
        raise RuntimeError("no thread")

    monkeypatch.setattr(threading.Thread, "start", fail)
    fds, before = len(os.listdir("/proc/self/fd")), children_of()
    with ProbeWorkers(1) as started, pytest.raises(RuntimeError, match="no thread"):
        start_lazy_scan(dataset_dir, [".mp4"], stop=threading.Event(), started=started)
    assert len(os.listdir("/proc/self/fd")) == fds
    assert children_of() <= before


def test_a_paced_scan_holds_its_background_while_a_reader_waits(tmp_path, dataset_dir):
    """Every worker idle with jobs left (a reader waits, nothing is waited for): the scan
    polls until the reader is served, then the background probes the rest."""
    jobs = copies(tmp_path, dataset_dir, 3)
    queue = RecordedQueue(jobs)
    waiting = queue.readers_wait()
    waiting.__enter__()
    threading.Timer(0.5, waiting.__exit__, (None, None, None)).start()
    started = time.monotonic()
    try:
        pace = ScanPace(paced_from_videos=1)
        results = probe_files(queue, MediaLimits(), workers=1, pace=pace)
    finally:
        queue.close()
    assert time.monotonic() - started >= 0.5
    assert set(results) == {job.key for job in jobs}
    assert [role for role, _ in queue.taken] == [BACKGROUND] * 3


def test_a_reader_that_always_waits_leaves_the_background_its_share(tmp_path, dataset_dir):
    """Several tasks' readers keep a reader waiting nearly all the time: the background still
    takes a message's jobs every `held_every_s`, and the scan ends (the warm index and the
    full list of bad videos come with its end)."""
    jobs = copies(tmp_path, dataset_dir, 6)
    queue = RecordedQueue(jobs, held_every_s=0.05, held_jobs=2)
    stop = threading.Event()
    timer = threading.Timer(20, stop.set)
    timer.start()
    try:
        with queue.readers_wait():
            results = probe_files(queue, MediaLimits(), workers=1, stop=stop,
                                  pace=ScanPace(paced_from_videos=1))
    finally:
        timer.cancel()
        queue.close()
    assert set(results) == {job.key for job in jobs}
    assert [role for role, _ in queue.taken] == [BACKGROUND] * 6
