"""Probe workers started ahead of a scan (the daemon starts them before its imports and its
mount): the scan uses them instead of starting its own, and none is left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from sandfs.media import scan_workers
from sandfs.media.probebook import ProbeQueue
from sandfs.media.scan import scan_dataset
from sandfs.media.scan_workers import ProbeJob, ProbeWorkers, ScanPace, probe_files
from sandfs.media.types import MediaLimits, ProbeFacts, ProbeFailure
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
    code = ("import sys; from sandfs.media.scan_workers import ProbeWorkers, worker_main; "
            "print('numpy' in sys.modules, 'av' in sys.modules); "
            "import sandfs.media.probe; print('numpy' in sys.modules, 'av' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "False", "False", "True"]


def test_jobs_queued_behind_a_worker_that_dies_go_to_its_replacement(tmp_path, dataset_dir):
    """A worker holds up to IN_FLIGHT jobs: when it dies, only the job it was on fails (the
    process died); those waiting in its pipe are probed by the next worker, none lost."""
    source = sorted(dataset_dir.rglob("*.mp4"))[0]
    jobs = []
    for i in range(3 * scan_workers.IN_FLIGHT):
        path = tmp_path / f"v{i:02d}.mp4"
        shutil.copy(source, path)
        info = os.stat(path)
        jobs.append(ProbeJob(path.name, str(path), (info.st_dev, info.st_ino)))
    before, killed = children_of(), []

    def kill_after_the_first(key, result):
        if not killed:
            killed.extend(children_of() - before)
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    results = probe_files(jobs, MediaLimits(), workers=1, on_result=kill_after_the_first)
    assert len(killed) == 1 and set(results) == {job.key for job in jobs}
    died = [key for key, r in results.items() if isinstance(r, ProbeFailure)]
    assert len(died) <= 1 and all("process died" in results[key].detail for key in died)
    facts = [r for r in results.values() if isinstance(r, ProbeFacts)]
    assert len(facts) >= len(jobs) - 1 and all(f == facts[0] for f in facts)
    assert children_of() <= before


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


def test_a_paced_scan_probes_the_rest_in_a_niced_background_worker(tmp_path, dataset_dir):
    """ScanPace: the front worker (the daemon's priority) idles while nothing is waited for;
    the background one, niced, probes every job; a job waited for wakes the scan at once."""
    source = sorted(dataset_dir.rglob("*.mp4"))[0]
    jobs = []
    for i in range(12):
        path = tmp_path / f"v{i:02d}.mp4"
        shutil.copy(source, path)
        info = os.stat(path)
        jobs.append(ProbeJob(path.name, str(path), (info.st_dev, info.st_ino)))
    queue = ProbeQueue(jobs)
    before, nices = children_of(), []

    def on_result(key, result):
        if not nices:
            nices.extend(sorted(nice_of(pid) for pid in children_of() - before))
            queue.first(["v11.mp4"])

    try:
        pace = ScanPace(paced_from_videos=1, background_nice=7, background_in_flight=2)
        results = probe_files(queue, MediaLimits(), workers=1, on_result=on_result, pace=pace)
    finally:
        queue.close()
    assert nices == [0, 7]
    assert set(results) == {job.key for job in jobs}
    assert all(isinstance(r, ProbeFacts) for r in results.values())
    assert children_of() <= before
