"""Listing a dataset folder safely: the files a scan may probe, and those refused before any
opens them (scan.py's checks 1 and 2: names from the directory tree, then `lstat`/`stat`
without opening; the walk never leaves the root's filesystem nor follows a symlink out)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import operator
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from threading import Event
from typing import Protocol

from sandfs.errors import UserError
from sandfs.media.scan_workers import check_stop
from sandfs.media.types import (
    CHANGED,
    PERMISSION_DENIED,
    BadVideo,
    ListedVideo,
    MediaLimits,
    NamedOnce,
)
from sandfs.openat import open_no_symlinks
from sandfs.ratelog import RateLimitedLog

log = logging.getLogger(__name__)
WALK_WARNINGS = RateLimitedLog(log)  # one a folder: a flood on a huge or dead tree


class ScanTooLarge(UserError):
    """A dataset holds more files than a scan may list."""


class Known(Protocol):
    """The files as the scan index last listed them, taken without a stat of their own; their
    checks are made again later (`checked_again`)."""

    def __call__(self, rel_path: str) -> ListedVideo | None:
        """The file at `rel_path` (None: stat it)."""

    def every(self, rel_paths: list[str]) -> Sequence[ListedVideo] | None:
        """The files at these rel_paths, if it knows each."""


# (rel_path, VIDEO name: rel_path without extension, the file vetted by its stat or `known`):
# a tuple, not a record, one a file (250,000 of them made and dropped in the listing)
_Candidate = tuple[str, str, ListedVideo | BadVideo]


# a folder whose ctime is this close before a walk began, or later, may change again within
# the same tick of its filesystem's clock and keep its ctime: its names are listed again
RECENT_NS = 2_000_000_000
FolderStat = tuple[str, int, int, int, int]  # (rel_dir, st_dev, st_ino, mtime_ns, ctime_ns)


@dataclass(frozen=True, slots=True)
class WalkRecord:
    """What a walk listed, to list it again without a walk while none of its folders changed
    (docs/contract.md#warm-listing): each folder's stat as the walk found it, the files it
    counted (`max_scan_files`) and its candidates' rel_paths (a wanted extension, in a folder
    walked), by rel_path. A folder's ctime changes with each name added, removed or renamed in
    it, and with its own owner or mode."""

    folders: tuple[FolderStat, ...]
    files: int
    names: list[str]
    # no name collided and their order by rel_path was by VIDEO name: names all `known` are
    # the targets as they are (facts of the names alone, which stand while the folders do)
    plain: bool = False

    def holds(self, real_root: str) -> bool:
        """Is every folder the one the walk listed, unchanged (a stat each, no link followed:
        a folder swapped for a link, or a filesystem mounted on it, is another)?"""
        for rel_dir, device, ino, mtime_ns, ctime_ns in self.folders:
            try:
                now = os.stat(f"{real_root}/{rel_dir}" if rel_dir else real_root,
                              follow_symlinks=False)
            except OSError:
                return False
            if (now.st_dev, now.st_ino, now.st_mtime_ns, now.st_ctime_ns) != (
                    device, ino, mtime_ns, ctime_ns) or not stat.S_ISDIR(now.st_mode):
                return False
        return True


def vetted_targets(
    real_root: str, extensions: Iterable[str], limits: MediaLimits, stop: Event | None = None,
    known: Known | None = None, walked: WalkRecord | None = None,
) -> tuple[NamedOnce, list[BadVideo], WalkRecord | None]:
    """The files to probe (by VIDEO name: the order plans place them in), those refused by name
    or by stat alone (by rel_path), and what the walk listed (None: a folder changed as it
    began); a file `known` answers for is not stat'ed (its name is: it is listed only while
    in its folder). `walked`: a past walk's record, whose names are listed again without a
    walk if it `holds` (250,000 files: ~1 s of CPU less)."""
    if walked is not None and walked.files <= limits.max_scan_files and walked.holds(
            real_root):
        if walked.plain and known is not None:
            found = known.every(walked.names)
            if found is not None:  # each a row's: no stat, no name to claim or sort by
                return NamedOnce(found), [], walked
        candidates, record = _listed_again(real_root, walked.names, limits, known), walked
    else:
        candidates, record = _list_candidates(real_root, extensions, limits, stop, known)
    named, bad = _claim_names(candidates)
    in_order = _by_name(named)
    if record is not None and record is not walked:
        record = dataclasses.replace(record, plain=in_order and not bad)
    targets: list[ListedVideo] = []
    for candidate in named:
        vetted = candidate[2]
        (bad if isinstance(vetted, BadVideo) else targets).append(vetted)
    return NamedOnce(targets), bad, record


def _by_name(named: list[_Candidate]) -> bool:
    """Sorts the candidates by VIDEO name ("a.mp4" before "a-b.mp4", whose rel_path sorts
    first); were they in that order already?"""
    names = [candidate[1] for candidate in named]
    if all(map(operator.lt, names, itertools.islice(names, 1, None))):
        return True
    named.sort(key=operator.itemgetter(1))
    return False


def _listed_again(real_root: str, rel_paths: list[str], limits: MediaLimits,
                  known: Known | None) -> list[_Candidate]:
    """A walk's candidates again, its folders unchanged: each vetted as the walk does (a stat
    by its path, none for a file `known` answers for)."""
    candidates = []
    for rel_path in rel_paths:
        file_name = rel_path.rpartition("/")[2]
        name = rel_path[: rel_path.rfind(".")]
        vetted = (known and known(rel_path)) or _check_by_path(real_root, rel_path, name,
                                                                file_name, limits)
        candidates.append((rel_path, name, vetted))
    return candidates


def _check_by_path(real_root: str, rel_path: str, name: str, file_name: str,
                   limits: MediaLimits) -> ListedVideo | BadVideo:
    try:
        file_stat = os.stat(f"{real_root}/{rel_path}", follow_symlinks=False)
    except OSError as error:
        return BadVideo(rel_path, "open_invalid", f"cannot stat: {error.strerror}")
    return _check_file(real_root, rel_path, name, file_name, None, limits, file_stat)


def _list_candidates(real_root: str, extensions: Iterable[str], limits: MediaLimits,
                     stop: Event | None, known: Known | None
                     ) -> tuple[list[_Candidate], WalkRecord | None]:
    """Files under `real_root` with a wanted extension, sorted by relative path, each vetted by
    its stat (`_check_file`); hidden files and folders are skipped, symlinked folders and other
    filesystems (a mount inside the dataset, sandfs's own included) are not entered. The walk
    holds each folder by its descriptor, so a folder swapped for a link meanwhile leads nowhere
    else. ScanTooLarge past `limits.max_scan_files` files. Per file: one `lstat` and one
    `access` from the folder's descriptor (250,000 files: 2.4-3.4 s of CPU; listing their names
    alone, 0.1 s), none for a file `known` answers for. The record: the stat of each folder
    listed (taken as it is listed) and of each on another filesystem (its mount gone, the walk
    would enter it); None if one changed as the walk began (RECENT_NS) or one could not be
    listed."""
    wanted = {"." + ext.lower().lstrip(".") for ext in extensions}
    root_device = os.stat(real_root).st_dev
    candidates, listed, folders, errors = [], 0, [], []
    began_ns = time.time_ns()
    for dir_path, dir_names, file_names, dir_fd in os.fwalk(
            real_root, onerror=lambda error: (errors.append(error), _log_walk_error(error))):
        check_stop(stop)  # a stat of a huge dataset on a network disk takes a while
        rel_dir = os.path.relpath(dir_path, real_root).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        folders.append((prefix[:-1], *_stamp(os.fstat(dir_fd))))
        dir_names[:] = [d for d in dir_names if not d.startswith(".")
                        and _same_device(d, dir_fd, dir_path, root_device, prefix, folders)]
        listed += len(file_names)
        if listed > limits.max_scan_files:
            raise ScanTooLarge(f"dataset {real_root} holds more than max_scan_files="
                               f"{limits.max_scan_files} files (SANDFS_MAX_SCAN_FILES)")
        for file_name in file_names:
            dot = file_name.rfind(".")  # as splitext: a name starting with a dot is skipped
            if file_name[0] == "." or dot < 0 or file_name[dot:].lower() not in wanted:
                continue
            rel_path = prefix + file_name
            name = rel_path[: len(rel_path) - len(file_name) + dot]
            vetted = (known and known(rel_path)) or _check_file(
                real_root, rel_path, name, file_name, dir_fd, limits)
            candidates.append((rel_path, name, vetted))
    candidates.sort()  # by rel_path: unique, so the vetted files are never compared
    if errors or any(folder[4] >= began_ns - RECENT_NS for folder in folders):
        return candidates, None
    return candidates, WalkRecord(tuple(folders), listed, [c[0] for c in candidates])


def _stamp(folder: os.stat_result) -> tuple[int, int, int, int]:
    return folder.st_dev, folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns


def _same_device(name: str, dir_fd: int, dir_path: str, device: int, prefix: str,
                 folders: list[FolderStat]) -> bool:
    """Is the folder `name` on `device`? If not, its stat joins `folders`."""
    try:
        found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return True  # fwalk meets the error again and reports it
    if found.st_dev == device:
        return True
    folders.append((prefix + name, *_stamp(found)))
    WALK_WARNINGS.warning("not scanning %s: another filesystem",
                          ascii(os.path.join(dir_path, name)))
    return False


def _log_walk_error(error: OSError) -> None:
    WALK_WARNINGS.warning("cannot list %s: %s", ascii(error.filename), ascii(error.strerror))


def _claim_names(candidates: list[_Candidate]) -> tuple[list[_Candidate], list[BadVideo]]:
    """In sorted order, a file whose VIDEO name is taken by an earlier file, equals the folder
    of an earlier file, or lies under a folder named like an earlier video is a collision."""
    if not _may_collide(candidates):
        return candidates, []
    owner_by_name: dict[str, str] = {}  # VIDEO name -> rel_path
    owner_by_folder: dict[str, str] = {}  # folder path -> first rel_path in it
    folders_of: dict[str, list[str]] = {}  # a folder's path -> it and its ancestors
    named, bad = [], []
    for candidate in candidates:
        rel_path, name, _ = candidate
        folder = name.rpartition("/")[0]
        folders = folders_of.get(folder)
        if folders is None:
            folders = folders_of[folder] = _ancestor_folders(name)
        clash = owner_by_name.get(name) or owner_by_folder.get(name)
        clash = clash or next((owner_by_name[f] for f in folders if f in owner_by_name), None)
        if clash:
            bad.append(
                BadVideo(rel_path, "name_collision", f"name collides with {clash}")
            )
            continue
        owner_by_name[name] = rel_path
        for folder in folders:
            owner_by_folder.setdefault(folder, rel_path)
        named.append(candidate)
    return named, bad


def _may_collide(candidates: list[_Candidate]) -> bool:
    """Does a VIDEO name repeat or name a folder of the listing? If not (most datasets), no
    file collides: 250,000 files asked in 0.1 s of CPU, where claiming each took 0.5."""
    names = {name for _, name, _ in candidates}
    if len(names) < len(candidates):
        return True
    folders = {name.rpartition("/")[0] for name in names}
    return any(f in names for folder in folders for f in _ancestor_folders(folder + "/"))


def _ancestor_folders(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# ---------------------------------------------------------------------------- stat checks


def checked_again(real_root: str, listed: ListedVideo, limits: MediaLimits
                  ) -> tuple[str, str] | None:
    """Why the file at `listed.path`, which the listing took from the scan index, is not the
    one it describes any more ((reason, detail): the walk's check that refuses it now, else
    CHANGED and how it differs), or None: the walk's checks of it stand. One `stat` and one
    `access` by path, nothing opened (250,000 files checked through each one's folder opened
    through no symlink took 3.8 s of the warm startup's CPU); a link in its place is resolved
    and checked as the walk would."""
    try:
        now = os.stat(listed.path, follow_symlinks=False)
    except OSError as error:
        return "open_invalid", f"cannot stat: {error.strerror}"
    if stat.S_ISLNK(now.st_mode):
        vetted = _check_file(real_root, listed.rel_path, listed.name,
                             listed.rel_path.rpartition("/")[2], None, limits, now)
        if isinstance(vetted, BadVideo):
            return vetted.reason, vetted.detail
        return CHANGED, "a symlink in its place since the scan index"
    unchanged, readable = listed.changed(now) is None, os.access(listed.path, os.R_OK)
    if unchanged and readable:
        return None
    return _refused(listed.path, now, False, real_root, limits, lambda: readable) or (
        CHANGED, _how_changed(listed, now))


def _how_changed(listed: ListedVideo, now: os.stat_result) -> str:
    """The stat fields in which the file at `listed.path` differs from its row (source_changed
    says only that it does): what an operator needs to tell a copy from a touch or a chmod."""
    was_uid, was_gid, was_mode = listed.access or (None, None, None)
    fields = (("inode", listed.identity, (now.st_dev, now.st_ino)),
              ("bytes", listed.size_bytes, now.st_size),
              ("mtime", listed.mtime_ns, now.st_mtime_ns),
              ("uid", was_uid, now.st_uid), ("gid", was_gid, now.st_gid),
              ("mode", was_mode and oct(was_mode), oct(now.st_mode)))
    changes = [f"{field} {was} -> {new}" for field, was, new in fields
               if was is not None and was != new]
    return "changed since the scan index: " + ", ".join(changes)


def _check_file(real_root: str, rel_path: str, name: str, file_name: str, dir_fd: int | None,
                limits: MediaLimits, file_stat: os.stat_result | None = None
                ) -> ListedVideo | BadVideo:
    """Vets a file by its stat only: nothing is opened for reading here. A symlink is followed
    to its target, which must be a regular file under the root, reached through no further
    link. `dir_fd`: its folder's (None: the file is reached by its path, `file_stat` given);
    `file_stat`: its `lstat`, if taken already."""
    path = f"{real_root}/{rel_path}"
    try:
        file_stat = file_stat or os.stat(file_name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as error:
        return BadVideo(rel_path, "open_invalid", f"cannot stat: {error.strerror}")
    linked = stat.S_ISLNK(file_stat.st_mode)
    if linked:
        path = os.path.realpath(path)
        file_stat = _stat_no_symlinks(path)
        if isinstance(file_stat, OSError):
            return BadVideo(rel_path, "open_invalid", f"cannot stat: {file_stat.strerror}")
    refused = _refused(path, file_stat, linked, real_root, limits, lambda: (
        os.access(path, os.R_OK) if linked or dir_fd is None
        else os.access(file_name, os.R_OK, dir_fd=dir_fd)))
    if refused is not None:
        return BadVideo(rel_path, *refused)
    return ListedVideo(
        name, rel_path, path, file_stat.st_size, file_stat.st_mtime_ns,
        (file_stat.st_dev, file_stat.st_ino),
        (file_stat.st_uid, file_stat.st_gid, file_stat.st_mode),
    )  # fmt: skip


def _refused(path: str, file_stat: os.stat_result, linked: bool, real_root: str,
             limits: MediaLimits, readable: Callable[[], bool]) -> tuple[str, str] | None:
    """Why the walk refuses the file `file_stat` describes ((reason, detail)), or None."""
    if not stat.S_ISREG(file_stat.st_mode):
        return "not_regular", f"not a regular file ({_file_kind(file_stat.st_mode)})"
    if linked and os.path.commonpath([real_root, path]) != real_root:
        return "outside_root", "symlink resolves outside the dataset root"
    # a daemon that is not root: out of the listing, as a root daemon's owner filter leaves
    # it (a probe's refusal would keep its slots)
    if not readable():
        return PERMISSION_DENIED, f"the daemon's user (uid {os.geteuid()}) cannot read it"
    if file_stat.st_size == 0:
        return "open_invalid", "empty file"
    if file_stat.st_size > limits.max_file_bytes:
        return "too_large", f"{file_stat.st_size} bytes > max_file_bytes {limits.max_file_bytes}"
    return None


def passes_stat_checks(mode: int, size_bytes: int, limits: MediaLimits) -> bool:
    """Does a file of this stat pass `_refused`'s checks of its kind and size under `limits`
    (its access is checked by `checked_again`)? What a cold listing refuses, a warm one must
    not take from a row: its views would differ."""
    return stat.S_ISREG(mode) and 0 < size_bytes <= limits.max_file_bytes


def _stat_no_symlinks(path: str) -> os.stat_result | OSError:
    """The stat of what `path` names through no symlink (O_PATH: a FIFO is not opened)."""
    try:
        fd = open_no_symlinks(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError as error:
        return error
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISFIFO: "FIFO", stat.S_ISSOCK: "socket", stat.S_ISCHR: "character device",
        stat.S_ISBLK: "block device", stat.S_ISDIR: "directory",
    }  # fmt: skip
    return next((kind for test, kind in kinds.items() if test(mode)), "special file")
