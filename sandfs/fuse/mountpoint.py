"""The mountpoint: FUSE present, an empty directory (a stale mount of a killed daemon cleaned
first, a live one refused), and the mount options. The layout checks are in `layout`."""

from __future__ import annotations

import errno
import logging
import os
import subprocess

import pyfuse3

from sandfs.errors import UserError

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


PATCHED_PYFUSE3 = "reply-nogil-1"  # the build of third_party/pyfuse3, told by SANDFS_PATCH


def replies_release_gil() -> bool:
    """Whether this pyfuse3 is third_party/pyfuse3's build, whose replies (the kernel's copy of
    a read's bytes) release the GIL. A stock pyfuse3 serves the same bytes holding it."""
    return getattr(pyfuse3, "SANDFS_PATCH", None) == PATCHED_PYFUSE3


def check_fuse_available() -> None:
    if not os.path.exists("/dev/fuse"):
        raise UserError("FUSE is not available: /dev/fuse is missing (install fuse3; in a "
                        "container add --device /dev/fuse --cap-add SYS_ADMIN)")
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        raise UserError(f"FUSE is not available: cannot open /dev/fuse ({exc.strerror})") from exc


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
