"""What another user's tasks make ahead on a root daemon (docs/deploy.md#limits), through a real
mount with `nobody` as that user and a short `idle_after_s`: a task read once goes back to
making nothing ahead once idle, and reads the same bytes after."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from sandfs.media.synth import make_dataset
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.users import NOBODY, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

IDLE_AFTER_S = 3


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def status(m) -> dict:
    return json.loads(read(m.path(".sand", "status.json")))


def write_task(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def wait_for(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.fixture(scope="module")
def mounted():
    """Root's task `t0` (3 epochs: windows 0 and 1) on a world-readable dataset."""
    folder = Path(tempfile.mkdtemp(prefix="sandfs-ahead-", dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "data", classes=["a", "b"], videos_per_class=2,
                 num_frames=(24, 32), size=(64, 48), seed=5, gop=12)
    config = write_config(folder / "t0.yaml", task_config(folder / "data", task="t0"))
    try:
        with mount_sandfs(folder / "run", [config],
                          extra_args=["--limit", f"idle_after_s={IDLE_AFTER_S}"]) as m:
            m.data = folder / "data"
            yield m
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def register_as_nobody(m, name: str, **overrides) -> tuple[str, object]:
    config = task_config(m.data, task=name, **overrides)
    del config["engine"]
    return as_user(NOBODY, write_task, m.path(".sand", "tasks", f"{name}.yaml"),
                   yaml.safe_dump(config, sort_keys=False))


def ready_ahead(m, task: str) -> int:
    return status(m)["tasks"][task]["ready_ahead"]


def test_a_task_read_once_makes_nothing_ahead_once_idle(mounted):
    m = mounted
    assert wait_for(lambda: status(m)["scheduler"]["views_ready"] == 3, 30)  # t0's 3 epochs
    assert register_as_nobody(m, "n1", seed=1, epochs=40) == ("ok", None)
    first = as_user(NOBODY, read, m.path("n1", "20", "0", "view"))
    assert first[0] == "ok"
    # H4 variant: read once, n1's windows 10 and 11 are made ahead, until n1 is idle
    assert wait_for(lambda: ready_ahead(m, "n1") == 3, IDLE_AFTER_S)
    assert wait_for(lambda: ready_ahead(m, "n1") == 0, IDLE_AFTER_S + 10)
    assert status(m)["scheduler"]["views_ready"] == 3
    done = status(m)["scheduler"]["jobs_done"]
    time.sleep(1.5)
    assert status(m)["scheduler"]["jobs_done"] == done  # nothing made ahead any more
    # read again: on demand, the same bytes (frozen draws), and made ahead again
    assert as_user(NOBODY, read, m.path("n1", "20", "0", "view")) == first
    assert as_user(NOBODY, read, m.path("n1", "21", "0", "view"))[0] == "ok"
    assert wait_for(lambda: ready_ahead(m, "n1") > 0, IDLE_AFTER_S)
    assert as_user(NOBODY, os.unlink, m.path(".sand", "tasks", "n1.yaml")) == ("ok", None)
