"""The scan a mount starts before the daemon's imports (`ScanAhead`): the daemon takes the
datasets' listings (a lazy scan: docs/contract.md#lazy-scan) whose probes come to the results
a full scan makes, hears the progress made before it listened, gets the scan's error or its
own stop, and a scan nobody took stops with its workers."""

from __future__ import annotations

import threading

import pytest

from sandfs.media.datasets import ScanAhead, scan_all
from sandfs.media.scan_workers import WORKERS_AHEAD, ProbeWorkers, ScanStopped
from sandfs.media.types import MediaLimits
from tests.helpers.processes import children_of


def scan_ahead(datasets, cache_dir=None) -> ScanAhead:
    return ScanAhead(datasets, cache_dir, 2, MediaLimits(), ProbeWorkers(WORKERS_AHEAD))


def test_the_daemon_takes_the_scans_and_hears_all_the_progress(dataset_dir, tmp_path):
    before = children_of()
    key = (str(dataset_dir), (".mp4",))
    expected = scan_all([key], None, 2, MediaLimits())
    heard = []
    with scan_ahead([key, key], str(tmp_path)) as ahead:
        threading.Event().wait(1.0)  # the scan ends before anyone listens
        scans = ahead.join(lambda k, done: heard.append((k, done)), threading.Event())
        scans[key].probes.wait_all()
    assert list(scans) == [key]
    assert scans[key].listed == expected[key].listed
    probed = [scans[key].probes.known(v.rel_path) for v in scans[key].listed]
    assert tuple(probed) == expected[key].videos and expected[key].bad == ()
    assert heard and all(k == key for k, _ in heard)
    last = heard[-1][1]
    assert last.videos_scanned == last.videos_total == len(expected[key].videos)
    assert list(tmp_path.glob("scan-*.json"))  # its index kept in the cache dir
    assert children_of() <= before


def test_the_daemon_gets_the_error_of_the_scan(tmp_path):
    with scan_ahead([(str(tmp_path / "missing"), (".mp4",))]) as ahead, \
            pytest.raises(NotADirectoryError):
        ahead.join(lambda k, done: None, threading.Event())


def test_a_stop_while_the_daemon_waits_stops_the_scan(many_videos):
    before = children_of()
    stop, seen = threading.Event(), []

    def progress(key, done):
        seen.append(done.videos_scanned)
        if done.videos_scanned >= 3:
            stop.set()

    key = (str(many_videos), (".mp4",))
    with scan_ahead([key]) as ahead:
        scans = ahead.join(progress, stop)  # once listed: the probes go on behind it
        with pytest.raises(ScanStopped):
            scans[key].probes.wait_all()
    assert max(seen) < 60
    assert children_of() <= before


def test_a_scan_nobody_took_stops_with_its_workers(many_videos):
    before = children_of()
    with scan_ahead([(str(many_videos), (".mp4",))]):
        pass
    assert children_of() <= before


def test_the_listing_s_log_counts_the_files_the_index_answers(dataset_dir, tmp_path, caplog):
    """A warm mount's listing log says how many files its scan index answers for (all 12,
    read when asked for), not how many of their rows were read by then (none: it said 0)."""
    key = (str(dataset_dir), (".mp4",))
    for warm in (False, True):
        caplog.clear()
        with caplog.at_level("INFO", logger="sandfs.media.datasets"), scan_ahead(
                [key], str(tmp_path)) as ahead:
            ahead.join(lambda k, done: None, threading.Event())[key].probes.wait_all()
        known = 12 if warm else 0
        assert f"12 files listed, 0 left out, {known} known from the index" in caplog.text
