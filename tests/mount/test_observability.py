"""Watching a real mount: .sand/metrics parsed by Prometheus' own parser agrees with
status.json after views were read, GET /metrics on the loopback port, and `sandfs status
--watch` draws the task's row."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers.harness import (
    free_port,
    is_mounted,
    mount_sandfs,
    require_fuse,
    run_cli,
    sandfs_command,
)
from tests.helpers.metrics import assert_between, parse_metrics


def read_views(mounted, count: int) -> None:
    for iteration in range(count):
        assert mounted.path("t0", "0", str(iteration), "view").read_bytes()


def test_metrics_agree_with_status_json(mounted):
    read_views(mounted, 3)
    before = json.loads(mounted.path(".sand", "status.json").read_bytes())
    text = mounted.path(".sand", "metrics").read_text()
    after = json.loads(mounted.path(".sand", "status.json").read_bytes())
    samples = parse_metrics(text)
    assert_between(samples, before, after)
    assert samples[("sandfs_views_served_total", (("task", "t0"),))] == 3
    assert samples[("sandfs_frames_decoded_total", ())] > 0
    assert "metrics" in {p.name for p in mounted.path(".sand").iterdir()}


def test_status_watch_draws_the_task(mounted):
    read_views(mounted, 2)
    done = run_cli("status", str(mounted.mountpoint), "--watch", "--iterations", "2",
                   "--interval", "0.2", timeout=60)
    assert done.returncode == 0, done.stderr
    task = json.loads(mounted.path(".sand", "status.json").read_bytes())["tasks"]["t0"]
    row = next(line for line in done.stdout.splitlines() if " t0 " in line)
    cells = [cell.strip() for cell in row.split("│")]
    assert cells[1:4] == ["t0", f"{task['epoch']}/{task['epochs']}",
                          f"{task['iteration']}/{task['iterations_per_epoch']}"]
    assert cells[5] == "2"  # views served (ready ahead moves while the scheduler works)
    assert "decoding saved" in done.stdout and done.stderr == ""


def test_metrics_port_serves_get_metrics_on_loopback(tmp_path, config_path):
    port = free_port()
    with mount_sandfs(tmp_path, [config_path], extra_args=["--metrics-port", str(port)]) as m:
        read_views(m, 2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
            assert got.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = parse_metrics(got.read().decode())
        assert samples[("sandfs_views_served_total", (("task", "t0"),))] == 2
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert refused.value.code == 404
        refused.value.close()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            idle.sendall(b"GET /metr")  # a client that stops mid-request holds nothing up
            assert m.path("t0", "0", "2", "view").read_bytes()
        with pytest.raises(OSError):  # loopback only
            socket.create_connection((outside_address(), port), timeout=2).close()


def outside_address() -> str:
    """An address of this machine that is not loopback (the route to the outside's source)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent
            address = s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback interface")
    if address.startswith("127."):
        pytest.skip("no non-loopback interface")
    return address


def test_a_metrics_port_in_use_fails_the_mount(tmp_path, config_path):
    require_fuse()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli("mount", str(tmp_path / "m"), "--config", str(config_path),
                       "--cache-dir", str(tmp_path / "c"), "--metrics-port", str(port))
    assert done.returncode == 1
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert not is_mounted(tmp_path / "m")


def test_status_watch_shows_a_stopped_daemon_as_not_answering(mounted):
    os.kill(mounted.process.pid, signal.SIGSTOP)
    try:
        done = run_cli("status", str(mounted.mountpoint), "--watch", "--iterations", "2",
                       "--interval", "0.2", "--timeout", "1", timeout=60)
    finally:
        os.kill(mounted.process.pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.split())
    assert shown.count("not answering:") == 2 and "did not answer within 1s" in shown


def test_ctrl_c_leaves_status_watch_with_status_zero(mounted):
    watcher = subprocess.Popen(sandfs_command("status", str(mounted.mountpoint), "--watch",
                                              "--interval", "0.2"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = ""
    deadline = time.monotonic() + 60
    while " t0 " not in first and time.monotonic() < deadline:  # watching, not starting up
        first = watcher.stdout.readline()
    watcher.send_signal(signal.SIGINT)
    _, err = watcher.communicate(timeout=30)
    assert " t0 " in first
    assert watcher.returncode == 0 and "Traceback" not in err, err
