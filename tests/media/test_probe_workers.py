"""Probe workers started ahead of a scan (the daemon starts them before its imports and its
mount): the scan uses them instead of starting its own, and none is left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandfs.media import scan_workers
from sandfs.media.scan import scan_dataset
from sandfs.media.scan_workers import ProbeWorkers
from sandfs.media.types import MediaLimits
from tests.helpers.processes import children_of


@pytest.fixture
def counted_starts(monkeypatch) -> list[int]:
    """Counts worker processes started from here on."""
    starts: list[int] = []
    real = scan_workers._start_worker

    def start():
        starts.append(1)
        return real()

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
    start, and probing demuxes without it."""
    code = ("import sys; from sandfs.media.scan_workers import worker_main; "
            "print('numpy' in sys.modules, 'av' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "True"]
