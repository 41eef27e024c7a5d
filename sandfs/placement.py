"""Where a task's dataset may be, by paths and the mount table alone: never holding or inside a
sandfs mount or the cache dir, and resolved without touching a sandfs mount (a daemon that
resolves a path in its own mount, from its event loop, waits on itself). A leaf: the config
loader, the owner checks and the planner use it."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

from sandfs.errors import UserError
from sandfs.mounttable import SANDFS_FSTYPE, mountpoints
from sandfs.remote.options import is_remote_url


def check_dataset_place(dataset: str, cache_dir: str) -> None:
    """For every task, those added to a live mount too: refuse a local dataset (a resolved
    path) that holds or lies in a sandfs mount (this one or another) or the cache dir. Its walk
    would list served views and cached objects, and hold the mount's folders open so that it
    could not be unmounted."""
    if is_remote_url(dataset):
        return
    for mount in mountpoints(SANDFS_FSTYPE):
        if inside(mount, dataset) or inside(dataset, mount):
            raise UserError(f"dataset directory {dataset} holds or lies in the sandfs mount "
                            f"{mount}: it would scan served views")
    cache = real_path(cache_dir)
    copies = os.path.join(cache, REMOTE_COPIES)  # where a remote dataset's copy is served from
    if inside(cache, dataset) or (inside(dataset, cache) and not inside(dataset, copies)):
        raise UserError(f"dataset directory {dataset} holds or lies in the cache dir {cache}")


def resolve_outside_mounts(path: str, mounts: Sequence[str] | None = None) -> str:
    """`os.path.realpath(path)` (absolute, normalized) that never steps onto a sandfs mount:
    UserError, naming `path` as given, where the path or one of its links leads into one. A
    daemon resolving a task's path in its own mount from its event loop would wait on itself."""
    mounts = mountpoints(SANDFS_FSTYPE) if mounts is None else mounts
    parts, resolved, links = deque(path.split("/")), "/", 0
    while parts:
        part = parts.popleft()
        if part in ("", "."):
            continue
        candidate = os.path.dirname(resolved) if part == ".." else os.path.join(resolved, part)
        mount = next((m for m in mounts if inside(candidate, m)), None)
        if mount is not None:
            raise UserError(f"{path} lies in the sandfs mount {mount}")
        try:
            target = os.readlink(candidate)
        except OSError:  # not a link, or missing: realpath keeps it as it is
            resolved = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise UserError(f"{path}: too many levels of symbolic links")
        parts.extendleft(reversed(target.split("/")))
        resolved = "/" if target.startswith("/") else resolved
    return resolved


MAX_LINKS = 40  # as the kernel's path walk


REMOTE_COPIES = "remote"  # the cache dir's folder of fetched remote datasets (remote/copy.py)


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
