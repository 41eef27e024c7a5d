"""Ownership and permissions through a real mount: a local user reads through the mount no bytes
(raw, decoded or derived) and no names they could not read directly. The daemon runs as root;
the other user is `nobody` (uid 65534, no groups), in a forked child of the test."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sandfs.media.synth import make_dataset
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.reliability import record
from tests.helpers.users import NOBODY, as_user

DENIED = (errno.EACCES, errno.EPERM)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


def nobody(action: Callable, *args) -> tuple[str, object]:
    return as_user(NOBODY, action, *args)


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def status(path) -> dict:
    return json.loads(read(path))


def wait_idle(status_path, timeout: float = 30.0) -> None:
    """Until the mount's background jobs are all done (status.json)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        record = status(status_path)
        if not record["scheduler"]["jobs_running"] and not record["queues"]["prematerialize"]:
            return
        time.sleep(0.02)
    raise AssertionError("the mount's jobs did not finish")


def write_task(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def getxattr(path) -> bytes:
    return os.getxattr(path, "user.sand.meta")


def listdir(path) -> list[str]:
    return sorted(os.listdir(path))


@pytest.fixture(scope="module")
def base() -> Path:
    """A folder anyone may traverse (pytest's own tmp folders are root-only), holding:
    data/pub/pub_00[0-3].mp4 with pub_000 mode 0600, data/vault/ (0700) with 4 videos and a
    labels.csv, and
    open/{a,b}/ with 3 world-readable videos each."""
    folder = Path(tempfile.mkdtemp(prefix="sandfs-perm-", dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "data", classes=["pub", "vault"], videos_per_class=4,
                 num_frames=(24, 32), size=(64, 48), seed=3, gop=12)
    (folder / "data" / "pub" / "pub_000.mp4").chmod(0o600)
    (folder / "data" / "vault" / "labels.csv").write_text("vault/vault_000,secret\n")
    (folder / "data" / "vault").chmod(0o700)
    make_dataset(folder / "open", classes=["a", "b"], videos_per_class=3,
                 num_frames=(24, 32), size=(64, 48), seed=4, gop=12)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def config(base: Path, name: str, dataset: str, **overrides) -> Path:
    return write_config(base / f"{name}.yaml",
                        task_config(base / dataset, task=name, **overrides))


def task_text(base: Path, name: str, dataset: str, **overrides) -> str:
    return yaml.safe_dump(task_config(base / dataset, task=name, **overrides), sort_keys=False)


def test_another_user_reads_nothing_of_a_root_task(base):
    with mount_sandfs(base / "run-a", [config(base, "t0", "data")]) as m:
        view = m.path("t0", "0", "0", "view")
        secret = m.path("t0", "videos", "pub", "pub_000.mp4")
        probes = [
            (read, view), (read, secret), (read, m.path("t0", "videos", "pub", "pub_001.mp4")),
            (read, m.path("t0", "videos", "pub", "pub_000", "frame0", "aug0")),
            (read, m.path("t0", "videos", "vault", "vault_000.mp4")),
            (read, m.path("t0", "videos", "vault", "vault_000", "frame3", "aug0")),
            (listdir, m.path("t0")), (listdir, m.path("t0", "videos")),
            (listdir, m.path("t0", "videos", "vault")), (getxattr, view),
            (read, m.path(".sand", "tasks", "t0.yaml")),
            (os.unlink, m.path(".sand", "tasks", "t0.yaml")),
        ]
        outcomes = [nobody(action, path) for action, path in probes]
        leaked = [(a.__name__, str(p)) for (a, p), o in zip(probes, outcomes, strict=True)
                  if o[0] != "errno" or o[1] not in DENIED]
        record("permission_probes", tried=len(probes), leaked=len(leaked))
        assert leaked == [], f"{len(leaked)} of {len(probes)} probes leaked: {leaked}"

        seen = nobody(status, m.path(".sand", "status.json"))
        assert seen[0] == "ok"
        assert seen[1]["tasks"] == {} and seen[1]["bad_videos"] == []
        text = json.dumps(seen[1])
        assert "pub_" not in text and "vault" not in text and "t0" not in text

        # root, who owns the task, reads all of it: 8 videos, the 0600 one as it is on disk
        assert read(secret) == read(base / "data" / "pub" / "pub_000.mp4")
        assert len(read(view)) == os.stat(view).st_size > 0
        assert status(m.path(".sand", "status.json"))["tasks"]["t0"]["videos"] == 8
        assert (os.stat(view).st_uid, stat.S_IMODE(os.stat(view).st_mode)) == (0, 0o400)
        assert stat.S_IMODE(os.stat(m.path("t0")).st_mode) == 0o500
        assert stat.S_IMODE(os.stat(m.path(".sand", "tasks")).st_mode) == 0o1777
        assert m.path(".sand", "tasks", "t0.yaml").exists()


def test_a_task_registered_by_another_user_is_theirs_and_holds_what_they_may_read(base):
    with mount_sandfs(base / "run-b", [config(base, "t0", "data")]) as m:
        tasks = m.path(".sand", "tasks")
        assert nobody(write_task, tasks / "mine.yaml", task_text(base, "mine", "data")) == (
            "ok", None)
        assert nobody(listdir, m.path("mine", "videos")) == ("ok", ["pub"])
        assert nobody(listdir, m.path("mine", "videos", "pub"))[1] == sorted(
            f"pub_00{i}{ext}" for i in (1, 2, 3) for ext in ("", ".mp4"))
        view = m.path("mine", "0", "0", "view")
        got = nobody(read, view)
        assert got[0] == "ok" and len(got[1]) == os.stat(view).st_size > 0
        assert read(view) == got[1]  # root reads every task
        assert (os.stat(view).st_uid, os.stat(view).st_gid) == (NOBODY, NOBODY)

        # a video its owner loses access to after the task was planned is refused at open
        revoked = base / "data" / "pub" / "pub_001.mp4"
        revoked.chmod(0o600)
        try:
            for leaf in ("pub_001.mp4", "pub_001/frame0/aug0"):
                assert nobody(read, m.path("mine", "videos", "pub", leaf))[1] in DENIED
        finally:
            revoked.chmod(0o644)
        assert nobody(read, m.path("mine", "videos", "pub", "pub_001.mp4"))[0] == "ok"

        seen = nobody(status, m.path(".sand", "status.json"))[1]
        assert list(seen["tasks"]) == ["mine"] and seen["tasks"]["mine"]["videos"] == 3
        assert [(b["path"], b["reason"], b["task"]) for b in seen["bad_videos"]] == [
            ("pub/pub_000.mp4", "permission_denied", "mine"),
            ("vault", "permission_denied", "mine")]
        assert "4 videos" in seen["bad_videos"][1]["detail"]
        assert "vault_" not in json.dumps(seen)  # the names inside the folder stay hidden

        # another owner is root's to give; a task over videos nobody may read is refused
        given = task_text(base, "theirs", "data", access={"owner": 0})
        assert nobody(write_task, tasks / "theirs.yaml", given) == ("errno", errno.EINVAL)
        hidden = task_text(base, "hidden", "data/vault")
        assert nobody(write_task, tasks / "hidden.yaml", hidden) == ("errno", errno.EINVAL)
        # root reads the labels file: one nobody may not read is refused, in the same words
        # whether it exists or not
        vault = base / "data" / "vault"
        for name, labels in (("there", vault / "labels.csv"), ("ghost", vault / "no.csv")):
            labelled = task_config(base / "data", task=name)
            labelled["dataset"]["labels"] = str(labels)
            assert nobody(write_task, tasks / f"{name}.yaml", yaml.safe_dump(labelled)) == (
                "errno", errno.EINVAL)
        errors = nobody(status, m.path(".sand", "status.json"))[1]["task_errors"]
        assert "only root may give a task another owner" in errors["theirs"]
        assert f"may not list {vault}" in errors["hidden"]
        assert errors["there"].endswith(f"may not read {vault / 'labels.csv'}")
        assert errors["ghost"].endswith(f"may not read {vault / 'no.csv'}")
        assert "theirs" in status(m.path(".sand", "status.json"))["task_errors"]

        assert nobody(os.unlink, tasks / "t0.yaml")[1] in DENIED
        assert nobody(os.unlink, tasks / "mine.yaml") == ("ok", None)
        assert not m.path("mine").exists() and m.path("t0").exists()


def test_identical_pipelines_of_two_owners_stay_apart(base):
    """Identical views may be shared underneath; their paths, inodes and modes may not."""
    with mount_sandfs(base / "run-c", [config(base, "t0", "open")]) as m:
        text = task_text(base, "twin", "open")
        assert nobody(write_task, m.path(".sand", "tasks", "twin.yaml"), text) == ("ok", None)
        mine, root_s = m.path("twin", "0", "0", "view"), m.path("t0", "0", "0", "view")
        assert nobody(read, mine)[0] == "ok"
        assert nobody(read, root_s)[1] in DENIED
        assert nobody(getxattr, root_s)[1] in DENIED
        assert (os.stat(mine).st_uid, os.stat(root_s).st_uid) == (NOBODY, 0)
        assert os.stat(mine).st_ino != os.stat(root_s).st_ino


def test_a_source_changed_while_mounted_fails_visibly(base):
    data = base / "mutable"
    shutil.copytree(base / "open", data)
    with mount_sandfs(base / "run-d", [config(base, "t0", "mutable")]) as m:
        source = m.path("t0", "videos", "a", "a_000.mp4")
        assert read(source) == read(data / "a" / "a_000.mp4")
        # the windows' jobs decode every video in the background: done before the change, or
        # they fail on it too (one logged error a job, which this test does not count on)
        wait_idle(m.path(".sand", "status.json"))
        with open(data / "a" / "a_000.mp4", "ab") as f:  # grows: passing it through would cut it
            f.write(b"\0" * 4096)
        for _ in range(2):
            with pytest.raises(OSError) as raised:
                read(source)
            assert raised.value.errno == errno.EIO
        m.expected_log_errors = 1  # the frame's failed decode
        with pytest.raises(OSError) as raised:  # its frames are decoded from the old file
            read(m.path("t0", "videos", "a", "a_000", "frame0", "aug0"))
        assert raised.value.errno == errno.EIO
        record = status(m.path(".sand", "status.json"))
        assert [(f["task"], f["path"]) for f in record["failures"]] == [
            ("t0", "videos/a/a_000.mp4"), ("t0", "videos/a/a_000/frame0/aug0")]
        source_failure, frame_failure = record["failures"]
        assert source_failure["reason"].startswith("source_changed")
        assert source_failure["count"] == 2
        assert "changed since the dataset scan" in frame_failure["reason"]
        assert record["failures_total"] == 2 + frame_failure["count"]  # the kernel may retry
        assert nobody(status, m.path(".sand", "status.json"))[1]["failures"] == []
