"""Acting as another local user from a root test: run a function in a forked child that has
dropped to that user's uid and gid (and no supplementary groups)."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
from collections.abc import Callable, Iterator

NOBODY = 65534
NOGROUP_USER = 65533  # a second unprivileged uid, in no group and without a home


def as_user(uid: int, action: Callable, *args) -> tuple[str, object]:
    """("ok", result) or ("errno", code) of `action(*args)` run as `uid` (gid `uid`, no
    supplementary groups) in a forked child."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                outcome = ("ok", action(*args))
            except OSError as exc:
                outcome = ("errno", exc.errno)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(pickle.dumps(outcome))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    os.waitpid(pid, 0)
    assert payload, "the child died without an answer"
    return pickle.loads(payload)


@contextlib.contextmanager
def connected_as(uid: int, address: tuple[str, int]) -> Iterator[None]:
    """A TCP connection to `address` from a forked child running as `uid`, held open until the
    server end closes; the caller accepts it inside the block (with a timeout: a child that
    fails exits without connecting)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            with socket.socket() as conn:
                conn.settimeout(30)
                # a bytes host: a str one needs the idna codec, and the interpreter's files
                # may be closed to `uid`
                conn.connect((address[0].encode(), address[1]))
                conn.recv(1)
        finally:
            os._exit(0)
    try:
        yield
    finally:
        os.waitpid(pid, 0)
