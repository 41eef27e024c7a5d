"""The mountpoint: FUSE present, a layout that cannot deadlock, an empty directory (a stale mount
of a killed daemon cleaned first, a live one refused), and the mount options."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Iterable

import pyfuse3

from sandfs.errors import UserError
from sandfs.fuse.mounttable import SANDFS_FSTYPE, mountpoints
from sandfs.remote.options import is_remote_url

log = logging.getLogger(__name__)


def quiet_late_replies() -> None:
    """pyfuse3 logs an ERROR when the kernel no longer waits for a reply (ENOENT: the request
    was interrupted, or the connection ended at unmount while a close was being answered).
    Nothing is lost: the kernel gave up on that request. Such lines go to debug."""
    logging.getLogger("pyfuse3").addFilter(_demote_late_reply)


def _demote_late_reply(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    if "fuse_reply_* failed with" in message and os.strerror(errno.ENOENT) in message:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger("pyfuse3").isEnabledFor(logging.DEBUG)
    return True


def check_fuse_available() -> None:
    if not os.path.exists("/dev/fuse"):
        raise UserError("FUSE is not available: /dev/fuse is missing (install fuse3; in a "
                        "container add --device /dev/fuse --cap-add SYS_ADMIN)")
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        raise UserError(f"FUSE is not available: cannot open /dev/fuse ({exc.strerror})") from exc


# -- the layout ------------------------------------------------------------------------------


def check_layout(mountpoint: str, cache_dir: str, dataset_dirs: Iterable[str]) -> None:
    """Refuse layouts where serving would wait on itself: the mountpoint in a dataset or in
    another sandfs mount, a dataset or the cache dir under the mountpoint. Pure path checks
    (nothing under the mountpoint is touched, so a hung mount there cannot hang us)."""
    outer = next((m for m in mountpoints(SANDFS_FSTYPE)
                  if inside(mountpoint, m) and m != mountpoint), None)
    if outer is not None:
        raise UserError(f"mountpoint {mountpoint} is inside the sandfs mount {outer}: "
                        f"reads would wait on the daemon that serves them")
    real_mountpoint = real_path(mountpoint)
    for dataset in (d for d in dataset_dirs if not is_remote_url(d)):  # URLs: fetched copies
        if inside(real_mountpoint, dataset):
            raise UserError(f"mountpoint {mountpoint} is the dataset directory {dataset} or "
                            f"inside it: the mount would hide the videos it reads")
        if inside(dataset, real_mountpoint):
            raise UserError(f"dataset directory {dataset} is inside the mountpoint "
                            f"{mountpoint}: the mount would hide the videos it reads")
    if inside(cache_dir, mountpoint) or inside(real_path(cache_dir), real_mountpoint):
        raise UserError(f"cache dir {cache_dir} is inside the mountpoint {mountpoint}; "
                        f"give a --cache-dir outside it")


def inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it (both absolute, normalized)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def real_path(path: str) -> str:
    """The path with links resolved, without touching `path` itself unless it is a link (it may
    be a stale or hung mount)."""
    path = os.path.abspath(path)
    if os.path.islink(path):
        return os.path.realpath(path)
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name) if name else path


# -- the mountpoint itself -------------------------------------------------------------------


def prepare_mountpoint(path: str) -> None:
    """Create it if missing, clean a stale mount left by a killed daemon, refuse a live one or
    a directory with files in it (the mount would hide them)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):
            raise UserError(f"mountpoint {path}: {exc.strerror}") from exc
        clean_stale_mount(path)
    if os.path.ismount(path):
        raise UserError(f"mountpoint {path} is busy: something is already mounted there "
                        f"(run: sandfs unmount {path})")
    if not os.path.isdir(path):
        raise UserError(f"mountpoint {path} is not a directory")
    entries = os.listdir(path)
    if entries:
        raise UserError(f"mountpoint {path} is not empty ({len(entries)} entries, e.g. "
                        f"{sorted(entries)[0]!r}): the mount would hide them; give an empty "
                        f"directory")


def clean_stale_mount(path: str) -> None:
    log.warning("mountpoint %s: stale mount of a dead daemon; unmounting it", path)
    for flags in (["-u"], ["-uz"]):
        done = subprocess.run(["fusermount3", *flags, path], capture_output=True, text=True)
        if done.returncode == 0:
            return
    raise UserError(f"mountpoint {path}: stale mount could not be removed "
                    f"({done.stderr.strip()}); run: fusermount3 -uz {path}")


def fuse_options() -> set[str]:
    options = set(pyfuse3.default_options)  # default_permissions: the kernel checks modes
    options |= {"fsname=sandfs", "subtype=sandfs"}
    if os.getuid() == 0 or user_allow_other():
        options.add("allow_other")  # trainers often run as another user than the daemon
    return options


def user_allow_other() -> bool:
    try:
        with open("/etc/fuse.conf") as f:
            return any(line.strip() == "user_allow_other" for line in f)
    except OSError:
        return False
