"""The permission model under a daemon that is not root: it runs as `nobody`, mounts through the
setuid fusermount3 without `allow_other` (this host's /etc/fuse.conf has no user_allow_other),
and serves its own user only. Its views are the bytes a root daemon serves the same owner."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from sandfs.media.synth import make_dataset
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.userdaemon import mount_as_user
from tests.helpers.users import NOBODY, NOGROUP_USER, as_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
SYS_ADMIN_ACCESS = Path("/sys/module/fuse/parameters/allow_sys_admin_access")


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def status(path) -> dict:
    return json.loads(read(path))


def listdir(path) -> list[str]:
    return sorted(os.listdir(path))


def owner_and_mode(path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def views(mountpoint: Path, epochs: int) -> dict[str, bytes]:
    """Every view of the task t0's first `epochs` epochs, by path, and check their sizes."""
    found = {}
    for epoch in range(epochs):
        for iteration in listdir(mountpoint / "t0" / str(epoch)):
            path = mountpoint / "t0" / str(epoch) / iteration / "view"
            data = read(path)
            assert len(data) == os.stat(path).st_size > 0
            found[f"{epoch}/{iteration}"] = data
    return found


def root_may_enter() -> bool:
    """Without allow_other the kernel refuses every other user, root too, unless the fuse
    module lets CAP_SYS_ADMIN in (allow_sys_admin_access, off by default)."""
    try:
        return SYS_ADMIN_ACCESS.read_text().strip() in ("Y", "1")
    except OSError:
        return False


@pytest.fixture(scope="module")
def base() -> Path:
    """A folder anyone may traverse holding data/{a,b}/ with 4 videos each, a/a_000.mp4 root's
    alone (0600), and a task config over it that nobody may read."""
    folder = Path(tempfile.mkdtemp(prefix="sandfs-userd-", dir="/tmp"))
    folder.chmod(0o755)
    make_dataset(folder / "data", classes=["a", "b"], videos_per_class=4,
                 num_frames=(24, 32), size=(64, 48), seed=5, gop=12)
    (folder / "data" / "a" / "a_000.mp4").chmod(0o600)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_daemon_run_as_nobody_serves_nobody_alone(base):
    config = write_config(base / "t0.yaml", task_config(base / "data", epochs=2))
    with mount_as_user(base / "user-run", [config], NOBODY) as m:
        line = next(x for x in Path("/proc/mounts").read_text().splitlines()
                    if x.split()[1] == str(m.mountpoint))
        options = line.split()[3].split(",")
        assert f"user_id={NOBODY}" in options and "allow_other" not in options

        record = as_user(NOBODY, status, m.path(".sand", "status.json"))[1]
        assert record["tasks"]["t0"]["videos"] == 7
        assert [(b["path"], b["reason"]) for b in record["bad_videos"]] == [
            ("a/a_000.mp4", "permission_denied")]
        assert as_user(NOBODY, listdir, m.path("t0", "videos", "a"))[1] == sorted(
            f"a_00{i}{ext}" for i in (1, 2, 3) for ext in ("", ".mp4"))
        source = m.path("t0", "videos", "b", "b_000.mp4")
        assert as_user(NOBODY, read, source) == ("ok", read(base / "data" / "b" / "b_000.mp4"))
        assert as_user(NOBODY, owner_and_mode, m.path("t0", "0", "0", "view"))[1] == (
            NOBODY, NOBODY, 0o400)
        assert as_user(NOBODY, owner_and_mode, m.path("t0"))[1] == (NOBODY, NOBODY, 0o500)
        served = as_user(NOBODY, views, m.mountpoint, 2)
        assert served[0] == "ok", served

        # no other user reaches the mount at all: not its root, not its status
        for path in (m.mountpoint, m.path(".sand", "status.json"), m.path("t0", "0", "0", "view")):
            assert as_user(NOGROUP_USER, os.stat, path) == ("errno", errno.EACCES)
        assert as_user(NOGROUP_USER, listdir, m.mountpoint) == ("errno", errno.EACCES)
        if root_may_enter():
            assert read(m.path("t0", "0", "0", "view")) == served[1]["0/0"]
        else:
            with pytest.raises(PermissionError):
                os.stat(m.mountpoint)

    # a root daemon planning the same task for the same owner leaves out the same video and
    # serves the same bytes
    owned = task_config(base / "data", epochs=2, access={"owner": NOBODY})
    with mount_sandfs(base / "root-run", [write_config(base / "t0-root.yaml", owned)]) as m:
        assert views(m.mountpoint, 2) == served[1]
        assert [(b["path"], b["reason"]) for b in status(
            m.path(".sand", "status.json"))["bad_videos"]] == [
            ("a/a_000.mp4", "permission_denied")]
