"""What another user's tasks make ahead and freeze on a root daemon (docs/deploy.md#limits),
through a real mount with `nobody` as that user and short limits: a task read once goes back to
making nothing ahead once idle, and reads the same bytes after; a task opens views only so far
past its reads, and the windows it froze are forgotten when it ends."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.harness import mounted_for_users, task_config
from tests.helpers.users import NOBODY, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

IDLE_AFTER_S = 3
AHEAD = 2  # windows_ahead_of_reads


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
    with mounted_for_users("sandfs-ahead-", ["--limit", f"idle_after_s={IDLE_AFTER_S}",
                                             "--limit", f"windows_ahead_of_reads={AHEAD}"]) as m:
        yield m


def register_as_nobody(m, name: str, tag: str = "train", **overrides) -> tuple[str, object]:
    config = task_config(m.data, task=name, **overrides)
    del config["engine"]
    config["dataset"]["tag"] = tag
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


def open_views(mnt: Path, task: str, epochs: range, read_them: bool) -> list[int | None]:
    """The errno of opening (and reading) TASK/E/0/view for each epoch (None: opened)."""
    outcomes = []
    for epoch in epochs:
        try:
            with open(mnt / task / str(epoch) / "0" / "view", "rb") as f:
                if read_them:
                    f.read()
            outcomes.append(None)
        except OSError as exc:
            outcomes.append(exc.errno)
    return outcomes


def frozen_windows(m) -> int:
    return len(json.loads(read(m.cache_dir / "plan-state.json"))["windows"])


def test_a_far_jumper_freezes_only_near_its_reads_and_is_forgotten(mounted):
    m = mounted
    kept = frozen_windows(m)
    # its own dataset (another tag): nothing it freezes is shared with t0
    assert register_as_nobody(m, "far1", tag="far", epochs=1000) == ("ok", None)
    # M1: opening E/0/view for E = 0, 3, 6, ... froze a window at every jump; past AHEAD
    # windows (k=2) beyond its reads the open is EDQUOT
    jumps = as_user(NOBODY, open_views, m.mountpoint, "far1", range(0, 30, 3), False)
    assert jumps == ("ok", [None, None] + [errno.EDQUOT] * 8)
    assert any("windows_ahead_of_reads" in f["reason"] for f in status(m)["failures"]
               if f["task"] == "far1")
    walked = as_user(NOBODY, open_views, m.mountpoint, "far1", range(0, 30, 3), True)
    assert walked == ("ok", [None] * 10)
    # the windows planned ahead of the last reads are frozen as they are planned
    assert wait_for(lambda: frozen_windows(m) >= kept + 15, 30), frozen_windows(m)
    # ended, the windows no task left can read are forgotten, in plan-state.json too
    assert as_user(NOBODY, os.unlink, m.path(".sand", "tasks", "far1.yaml")) == ("ok", None)
    assert frozen_windows(m) == kept
