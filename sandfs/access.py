"""Who may read what through the mount: a task's owner, the modes its tree is served with, and
whether that owner could read a video directly, so that the mount never hands anyone bytes
(raw, decoded or derived) or names they could not read themselves
(docs/contract.md#ownership-and-permissions).

The check is the kernel's discretionary one, computed from stat bits: search (x) on every
directory above the dataset, list (r and x) on every directory from the dataset root down to
the video, read (r) on the video. A file or folder carrying a POSIX ACL is granted only through
its owner bits (an ACL entry may deny what the mode bits seem to allow), so the check can refuse
what the kernel would allow but never the reverse.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sandfs.config.schema import AccessConfig, TaskConfig
from sandfs.errors import UserError
from sandfs.media.types import PERMISSION_DENIED, BadVideo, ListedVideo, VideoInfo
from sandfs.openat import READ_FLAGS, Identity, open_no_symlinks, open_regular
from sandfs.placement import resolve_outside_mounts

READ, SEARCH = 4, 1
LIST = READ | SEARCH
OVERFLOW_GID = 65534  # the group shown for an owner the user database does not know


@dataclass(frozen=True, slots=True)
class Owner:
    """Whom a task's tree belongs to, and what its files' mode is (directories add x where r)."""

    uid: int
    gid: int
    groups: frozenset[int]  # every group the owner is in: what the access check counts
    file_mode: int

    @property
    def dir_mode(self) -> int:
        return self.file_mode | ((self.file_mode & 0o444) >> 2)


@dataclass(frozen=True, slots=True)
class NodeAccess:
    """The owner and permission bits one node of the tree is served with."""

    uid: int
    gid: int
    mode: int


def daemon_uid() -> int:
    return os.geteuid()


def privileged(uid: int) -> bool:
    """May see every task in status.json: root and the daemon's own user."""
    return uid in (0, daemon_uid())


# -- owners ----------------------------------------------------------------------------------


def owner_of(cfg: TaskConfig) -> Owner:
    """The owner of `cfg`'s task: `access.owner` if given, else whoever registered it (the
    writer of `.sand/tasks/NAME.yaml`, or the daemon's user for `sandfs mount` configs)."""
    access, daemon = cfg.access, daemon_uid()
    registrar = daemon if access.registrar is None else access.registrar
    uid = registrar if access.owner is None else access.owner
    where = f"{cfg.source_path}: task {cfg.task}"
    if uid != registrar and registrar != 0:
        raise UserError(f"{where}: access.owner {uid}: only root may give a task another "
                        f"owner (registered by uid {registrar})")
    if daemon != 0 and uid != daemon:
        raise UserError(f"{where}: access.owner {uid}: the daemon runs as uid {daemon}, not "
                        f"root, so its tasks belong to uid {daemon}")
    fallback = access.registrar_gid if uid == registrar else None
    primary, groups = user_groups(uid, fallback)
    if access.group is not None and registrar != 0 and \
            access.group not in user_groups(registrar, access.registrar_gid)[1]:
        raise UserError(f"{where}: access.group {access.group}: uid {registrar} is not in "
                        f"that group (only root may give a task another group)")
    gid = primary if access.group is None else access.group
    mode = access.mode if access.mode is not None else (
        0o400 if access.group is None else 0o440)
    return Owner(uid, gid, groups, mode)


def user_groups(uid: int, known_gid: int | None) -> tuple[int, frozenset[int]]:
    """(primary gid, every group) of `uid` from the user database; a user it does not know has
    only `known_gid` (a FUSE request's gid), or no group at all."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        if known_gid is None:
            return OVERFLOW_GID, frozenset()
        return known_gid, frozenset({known_gid})
    try:
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    except OSError:
        groups = [entry.pw_gid]
    return entry.pw_gid, frozenset(groups)


def stamped(access: AccessConfig, uid: int, gid: int) -> AccessConfig:
    """`access` of a task registered by the FUSE request of (uid, gid)."""
    return replace(access, registrar=uid, registrar_gid=gid)


# -- the access check ------------------------------------------------------------------------


def allowed(st: os.stat_result, uid: int, groups: frozenset[int], want: int,
            has_acl: bool = False) -> bool:
    """Would `uid` (in `groups`) get `want` (READ, SEARCH or LIST bits) on this file?"""
    if uid == 0:
        return not want & SEARCH or stat.S_ISDIR(st.st_mode) or bool(st.st_mode & 0o111)
    if st.st_uid == uid:
        bits = st.st_mode >> 6
    elif has_acl:
        return False
    elif st.st_gid in groups:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


class AccessCheck:
    """Answers for one owner, remembering each directory it stat'ed."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self._seen: dict[tuple[str, int], bool] = {}

    def may(self, path: str, want: int) -> bool:
        key = (path, want)
        if key not in self._seen:
            try:
                st = os.stat(path)
            except OSError:
                self._seen[key] = False
            else:
                self._seen[key] = allowed(st, self.owner.uid, self.owner.groups, want,
                                          _has_acl(path))
        return self._seen[key]

    def reachable(self, path: str, want: int) -> bool:
        """May the owner search every folder above `path` and get `want` on it?"""
        parents = os.path.dirname(path).split("/")
        return all(self.may("/".join(parents[:i]) or "/", SEARCH)
                   for i in range(1, len(parents) + 1)) and self.may(path, want)

    def blocked_at(self, root: str, path: str, identity: Identity | None = None) -> str | None:
        """None when the owner may read `path` (a file under `root`, the one the scan found
        there: `identity`) and list every folder from `root` down to it; else the
        dataset-relative name to report: the file, or the first folder it cannot list ("."
        for the root itself)."""
        if not self.reachable(root, LIST):
            return "."
        rel_parts = os.path.relpath(path, root).split("/")
        for depth in range(1, len(rel_parts)):
            folder = os.path.join(root, *rel_parts[:depth])
            if not self.may(folder, LIST):
                return "/".join(rel_parts[:depth])
        return None if self.may_read_file(path, identity) else "/".join(rel_parts)

    def may_read_file(self, path: str, identity: Identity | None) -> bool:
        """The read check made on the file a descriptor holds, reached through no symlink:
        a folder swapped for a link since the scan cannot point it at another file."""
        try:
            fd = open_no_symlinks(path, os.O_PATH | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if identity is not None and (st.st_dev, st.st_ino) != identity:
                return False
            return stat.S_ISREG(st.st_mode) and allowed(
                st, self.owner.uid, self.owner.groups, READ, _has_acl(f"/proc/self/fd/{fd}"))
        finally:
            os.close(fd)


def _has_acl(path: str) -> bool:
    try:
        os.getxattr(path, "system.posix_acl_access")
    except OSError:  # ENODATA: none; ENOTSUP: the filesystem has no ACLs
        return False
    return True


def check_owner_paths(cfg: TaskConfig, owner: Owner) -> None:
    """Refuse a task whose owner may not list its dataset folder or read its labels file, in
    words that do not tell whether the path exists: the daemon reads them as root. Each path
    is checked as written (the paths of `cfg` are not resolved yet), then resolved; a refusal
    names it as written, never where its links lead."""
    if owner.uid == 0 or daemon_uid() != 0:
        return
    check = AccessCheck(owner)
    labels = cfg.dataset.labels
    wanted = [(cfg.dataset.video_dataset_path, LIST)]
    if labels not in ("dirname", "none"):
        wanted.append((labels, READ))
    for path, want in wanted:
        real = resolve_outside_mounts(path)  # before any stat: it may lead into this mount
        if not (check.reachable(path, want) and check.reachable(real, want)):
            raise UserError(f"{cfg.source_path}: task {cfg.task}: its owner (uid {owner.uid}) "
                            f"may not {'list' if want == LIST else 'read'} {path}")


def read_owner_file(path: str, owner: Owner, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (absolute, as the task wrote it), read once
    through one descriptor that reached it by no symlink past its folder, and checked on that
    descriptor: a regular file (a FIFO, device or symlink is refused before a byte is read),
    at most `max_bytes`, readable by `owner`. OSError otherwise; a file the owner may not read
    and a missing one get the same words."""
    folder, name = os.path.split(path)
    real_folder = resolve_outside_mounts(folder)
    checked = owner.uid != 0 and daemon_uid() == 0
    check = AccessCheck(owner)
    if checked and not (check.reachable(folder, SEARCH) and check.reachable(real_folder, SEARCH)):
        raise PermissionError(errno.EACCES, f"its owner (uid {owner.uid}) may not read it")

    def opened(path: str) -> int:
        try:
            return open_no_symlinks(path, READ_FLAGS)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, "a symlink; name the file itself") from None
            raise PermissionError(errno.EACCES, f"its owner (uid {owner.uid}) may not read it"
                                  if checked else error.strerror) from None

    fd, st = open_regular(os.path.join(real_folder, name),
                          lambda: OSError(errno.EINVAL, "not a regular file"), opened)
    with os.fdopen(fd, "rb") as file:
        if checked and not allowed(st, owner.uid, owner.groups, READ,
                                   _has_acl(f"/proc/self/fd/{fd}")):
            raise PermissionError(errno.EACCES, f"its owner (uid {owner.uid}) may not read it")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes")
    return data


def owner_videos(cfg: TaskConfig, owner: Owner, videos: Sequence[ListedVideo] | Sequence[VideoInfo]
                 ) -> tuple[Sequence[ListedVideo] | Sequence[VideoInfo], tuple[BadVideo, ...]]:
    """The videos `owner` may read (`videos` itself when all), and a `permission_denied` entry
    for each file or folder left out. A daemon that is not root reads as the owner already, so
    the scan found only what the owner may read. A listed file (a lazy scan's) is checked as
    it is now: whether it is still the listed one is its probe's or its row's check (a file
    replaced since the scan index is `changed`), and every read of its bytes checks both."""
    if owner.uid == 0 or daemon_uid() != 0:
        return videos, ()
    root = cfg.dataset.video_dataset_path
    check = AccessCheck(owner)
    blocked = {v.rel_path: check.blocked_at(
        root, v.path, v.identity if isinstance(v, VideoInfo) else None) for v in videos}
    kept = [v for v in videos if blocked[v.rel_path] is None]
    if len(kept) == len(videos):
        return videos, ()
    if not kept:
        raise UserError(f"{cfg.source_path}: task {cfg.task}: its owner (uid {owner.uid}) may "
                        f"read none of the videos in {root}")
    return tuple(kept), refusals(blocked, owner.uid)


def owner_may_read(cfg: TaskConfig, owner: Owner, video: ListedVideo | VideoInfo) -> bool:
    """Is `video` still the owner's to read (checked again at each open of its bytes or
    frames: a chmod after the task was planned takes effect there)?"""
    if owner.uid == 0 or daemon_uid() != 0:
        return True
    root = cfg.dataset.video_dataset_path
    return AccessCheck(owner).blocked_at(root, video.path, video.identity) is None


def refusals(blocked: dict[str, str | None], uid: int) -> tuple[BadVideo, ...]:
    """One entry per unreadable file, one per folder that hides several (its own name only)."""
    counts: dict[str, int] = {}
    for rel_path, name in blocked.items():
        if name is not None:
            counts[name] = counts.get(name, 0) + (name != rel_path)
    return tuple(
        BadVideo(name, PERMISSION_DENIED,
                 f"{count} videos in a folder the task's owner (uid {uid}) cannot list"
                 if count else f"the task's owner (uid {uid}) cannot read it")
        for name, count in sorted(counts.items()))
