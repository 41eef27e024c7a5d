"""A scan run in a worker thread stops soon after its stop event is set (the daemon stops
during its startup scan): ScanStopped, and no probe worker process left behind."""

from __future__ import annotations

import threading

import pytest

from sandfs.media.datasets import scan_all
from sandfs.media.scan import scan_dataset
from sandfs.media.scan_workers import ScanStopped
from sandfs.media.types import MediaLimits
from tests.helpers.processes import children_of


def test_a_stop_during_probing_ends_the_scan_and_its_workers(many_videos):
    before = children_of()
    stop = threading.Event()
    seen = []

    def progress(done):
        seen.append(done.videos_scanned)
        if done.videos_scanned >= 3:
            stop.set()

    with pytest.raises(ScanStopped):
        scan_dataset(many_videos, [".mp4"], workers=2, progress=progress, stop=stop)
    assert 3 <= max(seen) < 60  # stopped midway, not at the end
    assert children_of() <= before  # its workers were stopped and reaped


def test_a_stop_set_before_scan_all_scans_nothing(many_videos):
    stop = threading.Event()
    stop.set()
    with pytest.raises(ScanStopped):
        scan_all([(str(many_videos), (".mp4",))], None, 2, MediaLimits(), stop=stop)
