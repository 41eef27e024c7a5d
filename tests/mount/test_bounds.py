"""Every local user is bounded (docs/deploy.md#limits): through a real mount of a root daemon,
the unprivileged user `nobody` runs scaled-down versions of the review's attacks (held-open
handles, uploads, tasks, a lease of a shared task, a metrics connection flood) against small
limits set on the command line, and gets the errno of each limit while root's task serves on."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.harness import (
    free_port,
    mounted_for_users,
    task_config,
)
from tests.helpers.users import NOBODY, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

LIMITS = {"handles_per_uid": 50, "uploads_per_uid": 4, "upload_bytes": 4096,
          "tasks_per_uid": 2, "metrics_connections": 4, "metrics_connections_per_uid": 2}
PORT = free_port()


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def status(path) -> dict:
    return json.loads(read(path))


def task_text(data: Path, name: str, **overrides) -> str:
    config = task_config(data, task=name, **overrides)
    del config["engine"]
    return yaml.safe_dump(config, sort_keys=False)


def write_task(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def daemon_fds(pid: int) -> list[str]:
    folder = f"/proc/{pid}/fd"
    names = []
    for fd in os.listdir(folder):
        with contextlib.suppress(OSError):  # closed meanwhile
            names.append(os.readlink(f"{folder}/{fd}"))
    return names


@pytest.fixture(scope="module")
def mounted():
    """Root's task `t0` on a world-readable dataset, with small limits."""
    flags = [f for name, n in LIMITS.items() for f in ("--limit", f"{name}={n}")]
    with mounted_for_users("sandfs-bounds-", [*flags, "--metrics-port", str(PORT)]) as m:
        yield m


def register_as_nobody(m, name: str, **overrides) -> tuple[str, object]:
    return as_user(NOBODY, write_task, m.path(".sand", "tasks", f"{name}.yaml"),
                   task_text(m.data, name, **overrides))


def nobody_errors(m) -> dict:
    return as_user(NOBODY, status, m.path(".sand", "status.json"))[1]["task_errors"]


def hold_handles(path, count: int) -> tuple[int, int | None]:
    """(handles opened, errno of the first refused open) holding up to `count` at once."""
    fds = []
    try:
        for _ in range(count):
            try:
                fds.append(os.open(path, os.O_RDONLY))
            except OSError as exc:
                return len(fds), exc.errno
        return len(fds), None
    finally:
        for fd in fds:
            os.close(fd)


def test_held_handles_cost_no_daemon_fd_and_stop_at_the_users_limit(mounted):
    m = mounted
    assert register_as_nobody(m, "mine") == ("ok", None)
    video = m.path("mine", "videos", "a", "a_000.mp4")
    # C5: past handles_per_uid nobody gets EMFILE, and may open again once closed
    assert as_user(NOBODY, hold_handles, video, 80) == ("ok", (LIMITS["handles_per_uid"],
                                                               errno.EMFILE))
    assert as_user(NOBODY, hold_handles, video, 10) == ("ok", (10, None))
    assert read(video) == read(m.data / "a" / "a_000.mp4")
    # a handle holds no fd of the daemon's (root is bound by the totals only)
    before = len(daemon_fds(m.process.pid))
    fds = [os.open(m.path("t0", "videos", "a", "a_000.mp4"), os.O_RDONLY) for _ in range(200)]
    try:
        assert len(daemon_fds(m.process.pid)) < before + 20
        assert os.pread(fds[-1], 16, 0) == read(m.data / "a" / "a_000.mp4")[:16]
    finally:
        for fd in fds:
            os.close(fd)
    assert len(read(m.path("t0", "1", "0", "view"))) > 0
    failures = status(m.path(".sand", "status.json"))["failures"]
    assert any("handles_per_uid" in f["reason"] for f in failures if f["task"] == "mine")
    assert as_user(NOBODY, os.unlink, m.path(".sand", "tasks", "mine.yaml")) == ("ok", None)


def hold_uploads(tasks: Path, count: int) -> list[int | None]:
    """The errno of each of `count` uploads created and held open at once (None: taken)."""
    fds, outcomes = [], []
    try:
        for i in range(count):
            try:
                fds.append(os.open(tasks / f"up{i}.yaml", os.O_WRONLY | os.O_CREAT, 0o600))
                outcomes.append(None)
            except OSError as exc:
                outcomes.append(exc.errno)
        try:
            os.pwrite(fds[0], b"x", LIMITS["upload_bytes"])  # one byte past the cap
        except OSError as exc:
            outcomes.append(exc.errno)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):  # an empty file is refused as a task
                os.close(fd)
    return outcomes


def test_uploads_are_small_and_few(mounted):
    m = mounted
    tasks = m.path(".sand", "tasks")
    # C6: 4 held at once, the 5th EDQUOT, a byte past upload_bytes EFBIG
    taken = as_user(NOBODY, hold_uploads, tasks, 6)
    assert taken == ("ok", [None] * 4 + [errno.EDQUOT] * 2 + [errno.EFBIG])
    assert "uploads_per_uid" in nobody_errors(m)["up4"]
    # the slots come back as the files close (each empty one was refused as a task)
    assert as_user(NOBODY, hold_uploads, tasks, 4)[1][:4] == [None] * 4


def test_a_user_holds_at_most_tasks_per_uid_tasks(mounted):
    m = mounted
    # H4: nobody's third task is refused with EDQUOT and a reason; root's is not bounded
    assert register_as_nobody(m, "n1") == ("ok", None)
    assert register_as_nobody(m, "n2") == ("ok", None)
    assert register_as_nobody(m, "n3") == ("errno", errno.EDQUOT)
    assert "tasks_per_uid" in nobody_errors(m)["n3"]
    write_task(m.path(".sand", "tasks", "r1.yaml"), task_text(m.data, "r1"))
    assert as_user(NOBODY, os.unlink, m.path(".sand", "tasks", "n1.yaml")) == ("ok", None)
    assert register_as_nobody(m, "n3") == ("ok", None)  # room again
    for name in ("n2", "n3", "r1"):
        os.unlink(m.path(".sand", "tasks", f"{name}.yaml"))


def open_and_close(path) -> None:
    os.close(os.open(path, os.O_RDONLY))


def test_only_the_owner_may_take_a_shared_tasks_lease(mounted):
    m = mounted
    shared = task_text(m.data, "shared", access={"mode": "0444"})
    write_task(m.path(".sand", "tasks", "shared.yaml"), shared)
    view = m.path("shared", "0", "0", "view")
    assert as_user(NOBODY, read, view)[0] == "ok"  # shared with every user
    # H1: opening and closing its lease would end it; only the owner may
    lease = m.path(".sand", "tasks", "shared.lease")
    assert as_user(NOBODY, open_and_close, lease) == ("errno", errno.EACCES)
    assert "shared" in status(m.path(".sand", "status.json"))["tasks"]
    assert as_user(NOBODY, read, view)[0] == "ok"
    os.unlink(m.path(".sand", "tasks", "shared.yaml"))


def idle_connections(port: int, count: int) -> tuple[int, int]:
    """(connections opened, of them closed by the daemon within 0.5 s), holding them 6 s."""
    conns = []
    try:
        for _ in range(count):
            conn = socket.socket()
            conn.settimeout(5)
            conn.connect((b"127.0.0.1", port))  # a bytes host: no idna codec to read
            conns.append(conn)
        time.sleep(0.5)
        closed = 0
        for conn in conns:
            conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                closed += conn.recv(1) == b""
        time.sleep(5.5)
        return len(conns), closed
    finally:
        for conn in conns:
            conn.close()


def get_metrics(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def test_idle_metrics_connections_of_a_user_delay_no_one_elses_scrape(mounted):
    m = mounted
    before = sum("socket:" in name for name in daemon_fds(m.process.pid))
    # M2: a user's idle connections past metrics_connections_per_uid are closed at once, the
    # others dropped after a second: root's scrape never waits behind them
    flood = {}
    thread = threading.Thread(target=lambda: flood.update(
        outcome=as_user(NOBODY, idle_connections, PORT, 150)))
    thread.start()
    try:
        time.sleep(1.0)
        sockets = sum("socket:" in name for name in daemon_fds(m.process.pid))
        assert sockets - before <= LIMITS["metrics_connections_per_uid"] + 2
        started = time.monotonic()
        assert get_metrics(PORT).startswith(b"HTTP/1.1 200 OK\r\n")
        assert time.monotonic() - started < 3  # behind the flood: until it ends, 5 s on
    finally:
        thread.join()
    opened, closed = flood["outcome"][1]
    assert opened == 150 and closed >= 150 - LIMITS["metrics_connections_per_uid"]
    assert len(read(m.path("t0", "2", "0", "view"))) > 0


def listdir(path) -> list[str]:
    return sorted(os.listdir(path))


def test_a_user_lists_only_the_tasks_they_may_read(mounted):
    m = mounted
    write_task(m.path(".sand", "tasks", "open.yaml"), task_text(m.data, "open",
                                                              access={"mode": "0444"}))
    assert register_as_nobody(m, "own") == ("ok", None)
    try:
        # L2: root's private t0 is not listed to nobody; the shared one and their own are
        assert as_user(NOBODY, listdir, m.mountpoint) == ("ok", [".sand", "open", "own"])
        assert as_user(NOBODY, listdir, m.path(".sand", "tasks")) == ("ok", ["own.yaml"])
        assert listdir(m.mountpoint) == [".sand", "open", "own", "t0"]
        assert listdir(m.path(".sand", "tasks")) == ["open.yaml", "own.yaml", "t0.yaml"]
    finally:
        os.unlink(m.path(".sand", "tasks", "open.yaml"))
        os.unlink(m.path(".sand", "tasks", "own.yaml"))
