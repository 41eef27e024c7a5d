"""A node's daemon actor counts its mount as serving only once the views serve: the daemon
mounts first and answers status.json while it still scans. No Ray cluster: the actor's class is
called directly, over a plain folder standing for the mount."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sandray = pytest.importorskip("sandfs.ray")


@pytest.fixture
def daemon(tmp_path):
    """The actor's object with a live process of its own standing for the daemon."""
    settings = sandray.DaemonSettings(mountpoint=f"{tmp_path}/{{node}}/mnt",
                                      cache_dir=f"{tmp_path}/{{node}}/cache")
    actor = sandray.NodeDaemon(settings, "node0123456789")
    actor.process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                     stdin=subprocess.PIPE)
    try:
        yield actor
    finally:
        actor.process.stdin.close()
        actor.process.wait(timeout=10)


def write_status(mountpoint: str, pid: int, phase: str) -> None:
    path = Path(mountpoint, ".sand", "status.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps({"pid": pid, "scan": {"phase": phase}}))
    path.with_suffix(".tmp").replace(path)  # a reader never sees half a file


@pytest.mark.parametrize("phase", ["scanning", "planning", "failed", "stopped"])
def test_a_mount_still_starting_is_not_serving(daemon, phase):
    write_status(daemon.mountpoint, daemon.process.pid, phase)
    assert not daemon.serving()
    assert daemon.status() == {}


def test_serving_once_the_views_serve_and_only_by_its_own_daemon(daemon):
    assert not daemon.serving()  # nothing mounted
    write_status(daemon.mountpoint, daemon.process.pid + 1, "ready")
    assert not daemon.serving()  # a stale mount of another daemon
    write_status(daemon.mountpoint, daemon.process.pid, "ready")
    assert daemon.serving() and daemon.status()["scan"]["phase"] == "ready"
    daemon.process.stdin.close()
    daemon.process.wait(timeout=10)
    assert not daemon.serving()  # its daemon exited


def test_the_wait_for_a_new_mount_ends_when_its_scan_does(daemon, monkeypatch):
    write_status(daemon.mountpoint, daemon.process.pid, "scanning")
    polls = []
    read_status = sandray._status

    def scanning_for_three_polls(mountpoint: str) -> dict:
        polls.append(mountpoint)
        if len(polls) == 3:  # the scan ends
            write_status(mountpoint, daemon.process.pid, "ready")
        return read_status(mountpoint)

    monkeypatch.setattr(sandray, "_status", scanning_for_three_polls)
    daemon._wait_served(0)
    assert len(polls) == 3 and daemon.serving()

