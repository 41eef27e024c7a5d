"""One worker's channel: pickled messages over a Unix stream socket, each with descriptors
passed beside it (SCM_RIGHTS). Not multiprocessing's Connection: it carries no descriptors."""

from __future__ import annotations

import array
import pickle
import socket
import struct
from collections.abc import Sequence
from typing import Any

MAX_FDS = 250  # per sendmsg (the kernel's SCM_MAX_FD is 253)
_HEADER = struct.Struct("<QI")  # payload bytes, descriptors


class ChannelClosed(EOFError):
    """The other end is gone (its process died, or closed it)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, message: Any, fds: Sequence[int] = ()) -> None:
        """The descriptors are duplicated into the receiver: the sender still closes its own."""
        try:
            self._send(message, fds)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from exc

    def recv(self) -> tuple[Any, list[int]]:
        """The next message and its descriptors (the receiver's to close)."""
        try:
            return self._recv()
        except OSError as exc:
            raise ChannelClosed(str(exc)) from exc

    def _send(self, message: Any, fds: Sequence[int]) -> None:
        payload = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        chunks = [fds[i:i + MAX_FDS] for i in range(0, len(fds), MAX_FDS)] or [()]
        for number, chunk in enumerate(chunks):
            data = _HEADER.pack(len(payload), len(fds)) if number == 0 else b"+"
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", chunk))]
            self.sock.sendmsg([data], ancillary if chunk else [])
        self.sock.sendall(payload)

    def _recv(self) -> tuple[Any, list[int]]:
        data, fds, _, _ = socket.recv_fds(self.sock, _HEADER.size, MAX_FDS)
        if not data:
            raise ChannelClosed("the channel was closed")
        header = data + self._exactly(_HEADER.size - len(data))
        size, count = _HEADER.unpack(header)
        while len(fds) < count:
            _, more, _, _ = socket.recv_fds(self.sock, 1, MAX_FDS)
            if not more:
                raise ChannelClosed("the channel was closed")
            fds.extend(more)
        return pickle.loads(self._exactly(size)), fds

    def _exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if not n:
                raise ChannelClosed("the channel was closed")
            got += n
        return bytes(buffer)

    def close(self) -> None:
        self.sock.close()
