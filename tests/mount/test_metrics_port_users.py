"""GET /metrics on the loopback port, asked by two local users of a root daemon: each sees the
samples of their own tasks only, as in .sand/metrics; root sees every task."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import yaml

from sandfs.media.synth import make_dataset
from tests.helpers.harness import free_port, mount_sandfs, task_config, write_config
from tests.helpers.metrics import parse_metrics
from tests.helpers.users import NOBODY, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def get_metrics(port: int) -> tuple[bytes, bytes]:
    """(status line, body) of GET /metrics over a plain socket (a bytes host: a str one needs
    the idna codec, whose file another user may not be able to read)."""
    with socket.socket() as conn:
        conn.settimeout(30)
        conn.connect((b"127.0.0.1", port))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


def tasks_in(body: bytes) -> set[str]:
    return {dict(labels)["task"] for (name, labels) in parse_metrics(body.decode())
            if name == "sandfs_task_videos"}


@pytest.fixture
def base() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="sandfs-metrics-", dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "data", classes=["a", "b"], videos_per_class=3,
                 num_frames=(24, 32), size=(64, 48), seed=6, gop=12)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_each_local_user_gets_their_own_tasks_samples(base):
    port = free_port()
    config = write_config(base / "t0.yaml", task_config(base / "data"))
    with mount_sandfs(base / "run", [config], extra_args=["--metrics-port", str(port)]) as m:
        mine = yaml.safe_dump(task_config(base / "data", task="mine"))
        assert as_user(NOBODY, m.path(".sand", "tasks", "mine.yaml").write_text, mine)[0] == "ok"

        line, body = get_metrics(port)
        assert line == b"HTTP/1.1 200 OK" and tasks_in(body) == {"t0", "mine"}
        seen = as_user(NOBODY, get_metrics, port)
        assert seen[0] == "ok" and seen[1][0] == b"HTTP/1.1 200 OK"
        assert tasks_in(seen[1][1]) == {"mine"}
        assert b'task="t0"' not in seen[1][1]
        samples = parse_metrics(seen[1][1].decode())
        assert samples[("sandfs_workers", ())] == 2  # the daemon's own figures stay
        # the same filter as the file: nobody's .sand/metrics names the same tasks
        assert tasks_in(as_user(NOBODY, m.path(".sand", "metrics").read_bytes)[1]) == {"mine"}
