"""Telling whoever started the daemon that the mount serves, and when it stops.

Two channels, both optional: systemd's notify protocol (`READY=1`, `STATUS=...`, `STOPPING=1` as
datagrams to the unix socket named by `$NOTIFY_SOCKET`; a name starting with '@' is in the
abstract namespace) and a readiness file descriptor (`--ready-fd N`: `ready\\n` once the mount
serves, or `error: MESSAGE\\n`, then the fd is closed). A failure to notify is logged, never
fatal: the mount serves either way.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def sd_notify(address: str, message: str) -> None:
    """Send one notify datagram to `address` (a path, or '@name' for the abstract namespace)."""
    target = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(target)
        sock.sendall(message.encode())


class Readiness:
    """The daemon's readiness channels: `notify_socket` ($NOTIFY_SOCKET) and `ready_fd`."""

    def __init__(self, notify_socket: str | None, ready_fd: int | None) -> None:
        self.notify_socket = notify_socket or None
        self.ready_fd = ready_fd

    def ready(self, status: str) -> None:
        self._notify(f"READY=1\nSTATUS={status}")
        self._answer("ready")

    def failed(self, message: str) -> None:
        self._notify(f"STATUS=failed: {message}")
        self._answer(f"error: {message}")

    def stopping(self) -> None:
        self._notify("STOPPING=1\nSTATUS=unmounting")

    def _notify(self, message: str) -> None:
        if self.notify_socket is None:
            return
        try:
            sd_notify(self.notify_socket, message)
        except OSError as exc:
            log.warning("cannot notify %s: %s", self.notify_socket, exc)

    def _answer(self, line: str) -> None:
        """Write one line to the readiness fd and close it (it answers once)."""
        fd, self.ready_fd = self.ready_fd, None
        if fd is None:
            return
        try:
            os.write(fd, f"{line}\n".encode())
            os.close(fd)
        except OSError as exc:
            log.warning("cannot write to the readiness fd %d: %s", fd, exc)
