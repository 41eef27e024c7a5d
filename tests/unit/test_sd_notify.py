"""The readiness channels without a mount: notify datagrams (by path and in the abstract
namespace), the --ready-fd answer written once, and a missing socket that is not fatal."""

from __future__ import annotations

import os
import socket

import pytest

from sandfs.readiness import Readiness


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notify_datagrams(tmp_path, abstract):
    address = f"@sandfs-unit-{os.getpid()}" if abstract else str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + address[1:] if abstract else address)
        sock.settimeout(5)
        readiness = Readiness(address, None)
        readiness.ready("serving /mnt: a, b")
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving /mnt: a, b"
        readiness.stopping()
        assert sock.recv(4096) == b"STOPPING=1\nSTATUS=unmounting"
        readiness.failed("no such dataset")
        assert sock.recv(4096) == b"STATUS=failed: no such dataset"


def test_the_ready_fd_answers_once_and_is_closed():
    read_fd, write_fd = os.pipe()
    readiness = Readiness(None, write_fd)
    readiness.ready("serving")
    readiness.failed("too late")  # the fd has answered already
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read() == b"ready\n"  # EOF: closed
    read_fd, write_fd = os.pipe()
    Readiness(None, write_fd).failed("mountpoint busy")
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read() == b"error: mountpoint busy\n"


def test_a_missing_socket_is_logged_not_raised(tmp_path, caplog):
    Readiness(str(tmp_path / "nobody-listens"), None).ready("serving")
    assert "cannot notify" in caplog.text
