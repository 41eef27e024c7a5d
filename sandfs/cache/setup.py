"""The cache dir of a mount: checked before anything is written in it (it may sit in a folder
others can write), its log opened without following links, and its object store opened."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence

from sandfs.cache.recovery import CacheDirError, StoreBusyError
from sandfs.cache.sizing import StoreSizing, writeback_threshold
from sandfs.cache.store import ObjectStore
from sandfs.config.settings import MountSettings
from sandfs.errors import UserError
from sandfs.fileio import remove_leftover_temps
from sandfs.plan.checkpoint import PLAN_STATE
from sandfs.plan.task import TaskPlan

log = logging.getLogger(__name__)

LOG_NAME = "sandfs.log"


def check_cache_dir(path: str) -> None:
    """Create it 0700; refuse one that is a link, another user owns or anyone may write (a
    user who controls it could point our files at theirs)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise UserError(f"cache dir {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"cache dir {path} is not a directory")
    if info.st_uid != os.getuid():
        raise UserError(f"cache dir {path} belongs to uid {info.st_uid}, not to you")
    if info.st_mode & 0o022:
        raise UserError(f"cache dir {path} is writable by others (mode {info.st_mode & 0o777:o}); "
                        f"chmod 700 it")


def prepare_cache_dir(path: str) -> None:
    """Check it, and remove the temp files of writes a kill interrupted."""
    check_cache_dir(path)
    for name in [PLAN_STATE, *os.listdir(path)]:
        if name == PLAN_STATE or name.startswith("scan-"):
            remove_leftover_temps(os.path.join(path, name))


def open_log(cache_dir: str) -> int:
    """A file descriptor appending to CACHE_DIR/sandfs.log (0600). Call after check_cache_dir;
    a link in its place is refused, not followed."""
    path = os.path.join(cache_dir, LOG_NAME)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise UserError(f"cannot open the log {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"cannot open the log {path}: not a regular file")
    return fd


def store_sizing(settings: MountSettings) -> StoreSizing:
    """How the mount's store is sized (read once: the memory available changes)."""
    return StoreSizing(settings.storage_budget_bytes, settings.storage_budget_given,
                       writeback_threshold())


def open_store(settings: MountSettings, plans: Sequence[TaskPlan],
               sizing: StoreSizing) -> ObjectStore:
    """The store, sized by `sizing` for `plans`."""
    budget = settings.storage_budget_bytes
    biggest = max((p.view_nbytes(0, 0) for p in plans), default=0)  # none: tasks join later
    if budget < biggest:
        raise UserError(f"storage budget {budget} bytes is smaller than one batch ({biggest} "
                        f"bytes); raise --budget / engine.storage_budget")
    fmt = None if settings.cache_format == "auto" else settings.cache_format
    size = sizing.store_bytes(plans)
    if not sizing.given:
        log.info("cache: the store keeps %d MiB (no storage budget given; the disk bound is "
                 "%d MiB); clips read once from memory are not written, so a restart decodes "
                 "them again (give a budget to keep them)", size >> 20, budget >> 20)
    store = ObjectStore(os.path.join(settings.cache_dir, "store"), size, default_fmt=fmt)
    try:
        report = store.open()
    except StoreBusyError as exc:
        raise UserError(f"cache dir {settings.cache_dir} is in use by another sandfs daemon; "
                        f"give this mount its own --cache-dir") from exc
    except CacheDirError as exc:
        raise UserError(str(exc)) from exc
    if report.corrupt_removed or report.temp_removed:
        log.warning("cache: removed %d corrupt objects and %d partial writes left by a crash",
                    report.corrupt_removed, report.temp_removed)
    return store
