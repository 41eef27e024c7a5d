"""Readiness for service managers through a real foreground mount: systemd's notify protocol
(a datagram socket bound by the test, by path and in the abstract namespace) and --ready-fd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from tests.helpers.harness import (
    forgiving_teardown,
    is_mounted,
    require_fuse,
    sandfs_command,
    start_daemon,
)

TIMEOUT = 60.0


def receive(sock: socket.socket, wanted: str, process: subprocess.Popen, log_path) -> str:
    """Datagrams until one holds `wanted` (a line); fails if the daemon exits first."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            message = sock.recv(4096).decode()
        except TimeoutError:
            assert process.poll() is None, f"daemon exited:\n{log_path.read_text()[-2000:]}"
            continue
        if wanted in message.splitlines():
            return message
    pytest.fail(f"no {wanted} within {TIMEOUT}s")


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_ready_once_serving_and_stopping_on_sigterm(tmp_path, config_path, abstract):
    require_fuse()
    mountpoint, log_path = tmp_path / "mnt", tmp_path / "daemon.log"
    mountpoint.mkdir()
    address = f"@sandfs-test-{os.getpid()}-{time.monotonic_ns()}" if abstract else str(
        tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + address[1:] if abstract else address)
        sock.settimeout(0.5)
        process = start_daemon(mountpoint, [config_path], tmp_path / "cache", log_path,
                               env={"NOTIFY_SOCKET": address})
        try:
            message = receive(sock, "READY=1", process, log_path)
            # at the moment READY=1 arrives, the mount already answers
            assert os.stat(mountpoint / ".sand" / "status.json").st_size > 0
            assert f"STATUS=serving {mountpoint}: t0" in message.splitlines()
            process.send_signal(signal.SIGTERM)
            assert "STATUS=unmounting" in receive(sock, "STOPPING=1", process, log_path)
            assert process.wait(timeout=15) == 0
            assert not is_mounted(mountpoint)
        finally:
            forgiving_teardown(mountpoint, process)


def read_fd_answer(read_fd: int) -> str:
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.read().decode()


@pytest.mark.parametrize("foreground", [True, False], ids=["foreground", "background"])
def test_ready_fd_says_ready_once_serving(tmp_path, config_path, foreground):
    require_fuse()
    mountpoint = tmp_path / "mnt"
    read_fd, write_fd = os.pipe()
    args = ["mount", str(mountpoint), "--config", str(config_path), "--cache-dir",
            str(tmp_path / "cache"), "--ready-fd", str(write_fd)]
    process = subprocess.Popen(sandfs_command(*args, *(["--foreground"] * foreground)),
                               pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    os.close(write_fd)
    try:
        assert read_fd_answer(read_fd) == "ready\n"  # EOF after it: the fd is closed
        assert os.stat(mountpoint / ".sand" / "status.json").st_size > 0
        assert process.wait(timeout=15) == 0 if not foreground else process.poll() is None
        # the foreground daemon is our child: `sandfs unmount` would wait for it to be reaped
        stop = ["fusermount3", "-u"] if foreground else sandfs_command("unmount")
        assert subprocess.run([*stop, str(mountpoint)], capture_output=True).returncode == 0
        assert process.wait(timeout=15) == 0
    finally:
        forgiving_teardown(mountpoint, process if foreground else None)


def test_ready_fd_says_why_the_mount_failed(tmp_path, config_path):
    require_fuse()
    mountpoint = tmp_path / "not-a-dir"
    mountpoint.write_text("a file")
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        sandfs_command("mount", str(mountpoint), "--config", str(config_path), "--foreground",
                       "--cache-dir", str(tmp_path / "cache"), "--ready-fd", str(write_fd)),
        pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    os.close(write_fd)
    answer = read_fd_answer(read_fd)
    assert process.wait(timeout=30) == 1
    assert answer.startswith("error: ") and answer.endswith("\n") and "not-a-dir" in answer
