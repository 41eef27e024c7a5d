"""A sandfs daemon run as an unprivileged user, started by a root test.

Two things of this machine would stop such a daemon that have nothing to do with sandfs, and a
private mount namespace of the daemon's own (gone with it; nothing of the system changes) sets
them as on a usual Linux host:

- /dev/fuse may be root's alone (mode 0600). libfuse opens it before it asks the setuid
  fusermount3 to mount, so the daemon's namespace sees a 0666 node of the same device there,
  as most distributions ship it. The mount itself still goes through fusermount3.
- The interpreter may live under a folder only root may enter (a pyenv under /root). The
  namespace covers that folder with an empty one and binds the interpreter's prefix back at its
  own path, so the daemon runs with the same interpreter, venv and code as the test.

The mountpoint, cache and log live in a folder bind-mounted onto itself and made `shared`, so
the FUSE mount made inside the namespace shows outside it, where the test reads it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

import pytest

from tests.helpers.harness import (
    MOUNT_TIMEOUT_SECONDS,
    Mounted,
    check_log,
    forgiving_teardown,
    fuse_skip_reason,
    start_daemon,
    strict_teardown,
)
from tests.helpers.mountwatch import is_mounted, serving
from tests.helpers.users import as_user

# $1: an empty private folder for the namespace's own tmpfs; $2: a folder to cover, or "";
# $3: the interpreter prefix to bind back under it; $4: the uid; the rest: the command
NAMESPACE_SCRIPT = r"""
set -e
scratch=$1 hidden=$2 prefix=$3 uid=$4
shift 4
mount -t tmpfs -o mode=0755 sandfs-test "$scratch"
mknod -m 0666 "$scratch/fuse" c 10 229
mount --bind "$scratch/fuse" /dev/fuse
if [ -n "$hidden" ]; then
    mkdir "$scratch/prefix"
    mount --bind "$prefix" "$scratch/prefix"
    mount -t tmpfs -o mode=0755 sandfs-test "$hidden"
    mkdir -p "$prefix"
    mount --bind "$scratch/prefix" "$prefix"
fi
exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"
"""


def closed_folder(path: str) -> str:
    """The highest folder above `path` that others may not search ("" when none)."""
    parts = os.path.realpath(path).split("/")
    for depth in range(2, len(parts)):
        folder = "/".join(parts[:depth])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder
    return ""


def wrapper(scratch: Path, uid: int) -> list[str]:
    """The command that runs its arguments as `uid` in the daemon's namespace."""
    prefix = os.path.realpath(sys.base_prefix)
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", NAMESPACE_SCRIPT,
            "sh", str(scratch), closed_folder(prefix), prefix, str(uid)]


@cache
def user_daemon_skip_reason() -> str | None:
    """Why a daemon cannot run as another user here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root to start the daemon as another user"
    reason = fuse_skip_reason()
    if reason is not None:
        return f"FUSE unavailable: {reason}"
    for tool in ("unshare", "setpriv", "fusermount3"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    helper = os.stat(shutil.which("fusermount3"))
    if helper.st_uid != 0 or not helper.st_mode & stat.S_ISUID:
        return "fusermount3 is not setuid root: an unprivileged user cannot mount"
    return probe_namespace()


def closed_checkout_reason() -> str | None:
    """Why another user cannot run this checkout's code (a venv under a private folder, such
    as a `mktemp -d` clone), or None."""
    if closed_folder(sys.prefix) and closed_folder(sys.prefix) != closed_folder(
            sys.base_prefix):
        return f"the venv {sys.prefix} is under {closed_folder(sys.prefix)}, closed to others"
    return None


def probe_namespace() -> str | None:
    """Set the namespace up once with `true` as the command: mknod and mount must be allowed."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"sandfs-ns-probe-{os.getpid()}"
    scratch.mkdir()
    try:
        done = subprocess.run([*wrapper(scratch, 65534), "true"], capture_output=True,
                              text=True, timeout=30)
    finally:
        scratch.rmdir()
    if done.returncode != 0:
        return f"cannot set up the daemon's mount namespace: {done.stderr.strip()}"
    return None


def require_user_daemon() -> None:
    """Skip (or, with SANDFS_REQUIRE_FUSE=1 as root, fail) where a daemon cannot run as
    another user; a checkout closed to others always skips: the machine could, this clone
    cannot."""
    closed = closed_checkout_reason()
    if closed is not None:
        pytest.skip(closed)
    reason = user_daemon_skip_reason()
    if reason is None:
        return
    if os.geteuid() == 0 and os.environ.get("SANDFS_REQUIRE_FUSE") == "1":
        pytest.fail(f"FUSE required (SANDFS_REQUIRE_FUSE=1) but a non-root daemon cannot run: "
                    f"{reason}")
    pytest.skip(reason)


def read_status(path: Path) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read())


def wait_served_as(uid: int, mounted: Mounted) -> None:
    """Until the daemon serves, seen by `uid` (without allow_other only it may look)."""
    deadline = time.monotonic() + MOUNT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if mounted.process.poll() is not None:
            raise RuntimeError(f"sandfs exited with {mounted.process.returncode} before "
                               f"mounting:\n{mounted.log_text()[-3000:]}")
        if is_mounted(mounted.mountpoint):
            seen = as_user(uid, read_status, mounted.path(".sand", "status.json"))
            if seen[0] == "ok" and serving(seen[1], mounted.process.pid):
                return
        time.sleep(0.1)
    raise RuntimeError(f"sandfs did not serve {mounted.mountpoint} in time:\n"
                       f"{mounted.log_text()[-3000:]}")


@contextlib.contextmanager
def mount_as_user(workdir: Path, configs: Sequence[Path], uid: int) -> Iterator[Mounted]:
    """A daemon run as `uid` on `workdir/share/mnt` (cache `mnt-cache`, both the user's), torn
    down like `mount_sandfs`'s: strictly on success, forgivingly on failure."""
    require_user_daemon()
    share, scratch = workdir / "share", workdir / "ns"
    for folder in (share, scratch):
        folder.mkdir(parents=True)
        folder.chmod(0o755)
    mountpoint, cache_dir = share / "mnt", share / "mnt-cache"
    for folder in (mountpoint, cache_dir):
        folder.mkdir(mode=0o700)
        os.chown(folder, uid, uid)
    subprocess.run(["mount", "--bind", share, share], check=True)
    process = None
    try:
        subprocess.run(["mount", "--make-shared", share], check=True)
        process = start_daemon(mountpoint, configs, cache_dir, share / "mnt.log",
                               wrapper=wrapper(scratch, uid))
        mounted = Mounted(mountpoint, process, share / "mnt.log", cache_dir)
        wait_served_as(uid, mounted)
        yield mounted
        strict_teardown(mounted)
        check_log(mounted)
    finally:
        forgiving_teardown(mountpoint, process)
        subprocess.run(["umount", "--lazy", share], check=False)
        assert not is_mounted(mountpoint), f"{mountpoint} is still mounted"
        assert not is_mounted(share), f"{share} is still mounted"
        assert process is None or process.poll() is not None, "the daemon is still running"
