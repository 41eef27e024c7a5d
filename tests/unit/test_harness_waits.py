"""The mount harness's waits give up: a status.json read the mount never answers, or a scan
whose count of probed files stands still, fails the test with what the daemon said instead
of hanging it (no mount needed: a folder and a FIFO stand in for one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.harness import read_within, wait_scanned


def test_a_read_the_mount_never_answers_times_out(tmp_path):
    fifo = tmp_path / "status.json"
    os.mkfifo(fifo)  # opened for reading, it blocks until a writer comes: an unanswered read
    with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
        read_within(fifo, 0.2)
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader gets EOF: its thread ends


def test_a_stalled_scan_fails_with_its_status_and_the_log(tmp_path):
    (tmp_path / ".sand").mkdir()
    scan = {"phase": "ready", "datasets": [{"videos_scanned": 5, "videos_total": 10}]}
    (tmp_path / ".sand" / "status.json").write_text(json.dumps({"scan": scan}))
    log = tmp_path / "daemon.log"
    log.write_text("probe worker 1234 (background) no result within ...: killed\n")
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            wait_scanned(tmp_path, daemon, log, stalled_s=0.3)
    finally:
        daemon.kill()
        daemon.wait()
    assert "the scan stalled at 5/10" in str(failed.value)
    assert "probe worker 1234" in str(failed.value)


def test_a_daemon_gone_during_the_scan_fails_at_once(tmp_path):
    log = tmp_path / "daemon.log"
    log.write_text("CRITICAL the scheduler failed\n")
    daemon = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    daemon.wait()
    with pytest.raises(pytest.fail.Exception, match=r"exited \(3\)[\s\S]*scheduler failed"):
        wait_scanned(tmp_path, daemon, log)
