"""Dataset scan: find the videos under a root, vet each file, count its frames.

Order of checks, cheapest and safest first:
1. names (hidden files, extensions, collisions) from the directory tree alone;
2. `lstat`/`stat` without opening: symlinks must resolve to a regular file inside the root,
   FIFOs/sockets/devices are refused (opening a FIFO hangs), empty and oversized files too;
3. a probe in a worker process (scan_workers: killed after `decode_timeout_seconds`, replaced
   when it crashes): open with O_NOFOLLOW, choose the video stream, check the coded size, count
   frames and keyframes from the demuxed packets, decoding only the first frame; a file whose
   packets cannot be trusted is decoded in full instead (probe: which kinds, and why).
Probe results persist in an optional JSON index (scan_index), so a remount of an unchanged
dataset opens nothing. Progress is reported through a callback (`ScanProgress`);
`StderrProgress` is a ready one for a terminal.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from threading import Event
from typing import TextIO

from sandfs.errors import UserError
from sandfs.media.probebook import ProbeBook, ProbeQueue
from sandfs.media.scan_index import (
    UNREADABLE,
    IndexKey,
    parse_entry,
    read_index,
    save_index,
)
from sandfs.media.scan_workers import (
    ProbeJob,
    ProbeWorkers,
    ScanStopped,
    check_stop,
    probe_files,
)
from sandfs.media.types import (
    DECODING,
    PERMISSION_DENIED,
    BadVideo,
    DatasetScan,
    ListedVideo,
    MediaLimits,
    ProbeFacts,
    ProbeFailure,
    ProbeResult,
    ScanProgress,
    VideoInfo,
)
from sandfs.openat import open_no_symlinks
from sandfs.ratelog import RateLimitedLog

log = logging.getLogger(__name__)
WALK_WARNINGS = RateLimitedLog(log)  # one a folder: a flood on a huge or dead tree

ProgressCallback = Callable[[ScanProgress], None]


class ScanTooLarge(UserError):
    """A dataset holds more files than a scan may list."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    rel_path: str
    name: str  # VIDEO name: rel_path without extension
    link_stat: os.stat_result | OSError  # from the walk's folder descriptor


@dataclass(frozen=True, slots=True)
class _Target:
    """A candidate that passed the stat checks: what to open and what identifies its content."""

    rel_path: str
    name: str
    path: str  # absolute, symlinks resolved
    size_bytes: int
    mtime_ns: int
    device: int
    inode: int
    access: tuple[int, int, int]  # st_uid, st_gid, st_mode

    @property
    def key(self) -> IndexKey:
        return IndexKey(self.path, self.size_bytes, self.mtime_ns)

    @property
    def listed(self) -> ListedVideo:
        return ListedVideo(self.name, self.rel_path, self.path, self.size_bytes, self.mtime_ns,
                           (self.device, self.inode), self.access)


# ---------------------------------------------------------------------------- entry point


def scan_dataset(
    root: str | os.PathLike[str],
    extensions: Iterable[str],
    *,
    limits: MediaLimits | None = None,
    workers: int = 2,
    index_path: str | os.PathLike[str] | None = None,
    progress: ProgressCallback | None = None,
    stop: Event | None = None,
    started: ProbeWorkers | None = None,
) -> DatasetScan:
    """Scans `root` for videos with one of `extensions` (case-insensitive, with or without the
    dot). `limits` default to MediaLimits.from_env(); `workers` probe processes run at once.
    `progress`, when given, is called in the calling thread with a ScanProgress once the files
    to probe are known (videos_scanned counts those found in the index), after every probed
    file, and once at the end (videos_scanned == videos_total); it must be quick and must not
    raise. Never raises for a bad file: it is reported in `DatasetScan.bad` and logged once at
    WARNING. Raises ScanStopped soon after `stop` is set (from another thread). `started`:
    probe workers started ahead (see ProbeWorkers)."""
    listing = _Listing.of(root, extensions, limits, index_path, stop)
    report = _progress_reporter(progress, listing.book.probed, len(listing.targets),
                                listing.began)
    jobs = listing.jobs()
    probe_files(jobs, listing.limits, workers, on_result=listing.recorder(report), stop=stop,
                started=started)
    return listing.finish(progress, num_probed=len(jobs))


def start_lazy_scan(
    root: str | os.PathLike[str],
    extensions: Iterable[str],
    *,
    stop: Event,
    limits: MediaLimits | None = None,
    workers: int = 2,
    index_path: str | os.PathLike[str] | None = None,
    progress: ProgressCallback | None = None,
    started: ProbeWorkers | None = None,
) -> tuple[DatasetScan, threading.Thread]:
    """A scan that returns once `root` is listed and vetted by name and stat (and the index
    read): its `listed` files are what plans place (docs/contract.md#lazy-scan), its `probes`
    fill in from the returned thread (started), which probes what planning waits for first.
    `videos` and `bad` hold what is known at return. Setting `stop` ends the thread soon (its
    waiters get ScanStopped); the caller joins it. Progress as for `scan_dataset`, from the
    thread."""
    listing = _Listing.of(root, extensions, limits, index_path, stop, defer=True)
    queue = ProbeQueue(listing.jobs())
    listing.book.queue = queue
    report = _progress_reporter(progress, listing.book.probed, len(listing.targets),
                                listing.began)
    num_probed = len(queue)
    own = ProbeWorkers(0) if started is None else started.hand_over(workers)

    def probe_rest() -> None:
        with own:
            try:
                listing.book.resolve_all()  # what the index says, before any probe
                probe_files(queue, listing.limits, workers, on_result=listing.recorder(report),
                            stop=stop, started=own)
            except ScanStopped:
                return
            except BaseException as error:  # the waiters hear of it, the log too
                log.error("probing %s failed: %s", ascii(listing.real_root), error)
                listing.book.fail(error)
                return
        listing.finish(progress, num_probed)

    thread = threading.Thread(target=probe_rest, name="lazy-scan", daemon=True)
    thread.start()
    return listing.partial(), thread


@dataclass(slots=True)
class _Listing:
    """A dataset listed and vetted, its probe results filling in (`book`; `results` as probed,
    for the index). One writer: the thread that probes."""

    real_root: str
    limits: MediaLimits
    targets: list[_Target]  # by rel_path
    refused: list[BadVideo]  # by name or stat
    book: ProbeBook
    results: dict[str, ProbeResult]
    index_path: str | os.PathLike[str] | None
    began: float
    decoded: int = 0  # probed files whose packets were not trusted
    deferred: set[str] = field(default_factory=set)  # index hits read when asked for
    index_as_is: bool = False  # the index holds exactly these results: not written again

    @classmethod
    def of(cls, root: str | os.PathLike[str], extensions: Iterable[str],
           limits: MediaLimits | None, index_path: str | os.PathLike[str] | None,
           stop: Event | None, *, defer: bool = False) -> _Listing:
        """`defer`: a usable video's index entry is read when its result is first asked for
        (a lazy scan: 100,000 entries took 2.6 s before serving); a bad one's at once."""
        began = time.monotonic()
        limits = limits or MediaLimits.from_env()
        real_root = os.path.realpath(root)
        if not os.path.isdir(real_root):
            raise NotADirectoryError(f"dataset root is not a directory: {os.fspath(root)!r}")
        targets, refused = _vetted_targets(real_root, extensions, limits, stop)
        book = ProbeBook(sorted((t.listed for t in targets), key=lambda v: v.name), stop)
        stored = read_index(index_path, limits) if index_path else {}
        listing = cls(real_root, limits, targets, refused, book, {}, index_path, began)
        hits = 0
        for target in targets:
            entry = stored.get(target.rel_path)
            if not _index_hit(entry, target):
                continue
            hits += 1
            if defer and "video" in entry:
                listing.deferred.add(target.rel_path)
                book.defer(target.rel_path, functools.partial(listing.from_index, target, entry))
            elif (result := listing.parsed(target, entry)) is not None:
                listing.record(target, result)
        listing.index_as_is = hits == len(targets) == len(stored)
        return listing

    def parsed(self, target: _Target, entry: dict) -> ProbeResult | None:
        """An index entry's result; None for a damaged one (then the file is probed)."""
        try:
            return parse_entry(entry)
        except UNREADABLE as error:
            log.warning("ignoring the scan index's entry for %s: %s", ascii(target.rel_path),
                        ascii(repr(error)))
            self.index_as_is = False
            return None

    def from_index(self, target: _Target, entry: dict) -> VideoInfo | BadVideo | None:
        """A deferred index hit, in whichever thread asks first; a damaged entry's file is
        probed first of all (None)."""
        result = self.parsed(target, entry)
        if result is None:
            self.book.queue.extendleft([ProbeJob(target.rel_path, target.path,
                                                 (target.device, target.inode))])
            return None
        self.results[target.rel_path] = result
        return self._probed(target, result)

    def record(self, target: _Target, result: ProbeResult) -> None:
        self.results[target.rel_path] = result
        self.book.record(target.rel_path, self._probed(target, result))

    @staticmethod
    def _probed(target: _Target, result: ProbeResult) -> VideoInfo | BadVideo:
        if isinstance(result, ProbeFailure):
            return BadVideo(target.rel_path, result.reason, result.detail)
        return _video_info(target, result)

    def jobs(self) -> list[ProbeJob]:
        """The files the index did not answer for, by rel_path."""
        return [ProbeJob(t.rel_path, t.path, (t.device, t.inode)) for t in self.targets
                if t.rel_path not in self.results and t.rel_path not in self.deferred]

    def recorder(self, report: Callable[[str, ProbeResult], None] | None
                 ) -> Callable[[str, ProbeResult], None]:
        """The per-result hook for probe_files: into the book, then `report`."""
        by_rel = {t.rel_path: t for t in self.targets}

        def record(key: str, result: ProbeResult) -> None:
            self.decoded += isinstance(result, ProbeFacts) and result.counted_by.startswith(
                DECODING)
            self.record(by_rel[key], result)
            if report is not None:
                report(key, result)

        return record

    def partial(self, num_probed: int = 0) -> DatasetScan:
        """What is known now, and the listing a plan places."""
        known = (self.book.known(t.rel_path) for t in self.targets)
        videos = sorted((v for v in known if isinstance(v, VideoInfo)), key=lambda v: v.name)
        bad = sorted([*self.refused, *self.book.bad()], key=lambda b: b.rel_path)
        return DatasetScan(self.real_root, tuple(videos), tuple(bad), num_probed,
                           self.book.listed, self.book)

    def finish(self, progress: ProgressCallback | None, num_probed: int) -> DatasetScan:
        """Every file probed: the index saved, the bad ones logged, the scan complete."""
        total = len(self.targets)
        if self.index_path and not (self.index_as_is and num_probed == 0):
            save_index(self.index_path, self.limits,
                       {t.rel_path: (t.key, self.results[t.rel_path]) for t in self.targets})
        scan = self.partial(num_probed)
        for item in scan.bad:
            name = os.path.splitext(item.rel_path)[0]
            log.warning(
                "video=%s path=%s reason=%s detail=%s",
                ascii(name), ascii(item.rel_path), item.reason, ascii(item.detail),
            )  # fmt: skip
        if progress:
            progress(ScanProgress(total, total, time.monotonic() - self.began))
        log.info(
            "scanned %s: %d usable, %d bad, %d probed (%d decoded in full), %d from the index, "
            "%.2f s", ascii(self.real_root), len(scan.videos), len(scan.bad), num_probed,
            self.decoded, total - num_probed, time.monotonic() - self.began,
        )  # fmt: skip
        return scan


def _vetted_targets(
    real_root: str, extensions: Iterable[str], limits: MediaLimits, stop: Event | None = None
) -> tuple[list[_Target], list[BadVideo]]:
    """The files to probe, and those refused by name or by stat alone."""
    named, bad = _claim_names(_list_candidates(real_root, extensions, limits))
    targets: list[_Target] = []
    for candidate in named:
        check_stop(stop)  # a stat of a huge dataset on a network disk takes a while
        checked = _check_file(real_root, candidate, limits)
        if isinstance(checked, BadVideo):
            bad.append(checked)
        else:
            targets.append(checked)
    return targets, bad


def _index_hit(entry: dict | None, target: _Target) -> bool:
    """The entry is of this file as it is (field by field: no IndexKey a file)."""
    try:
        return (entry is not None and entry["path"] == target.path
                and entry["size_bytes"] == target.size_bytes
                and entry["mtime_ns"] == target.mtime_ns)
    except UNREADABLE:
        return False


def _progress_reporter(
    progress: ProgressCallback | None, already: int, total: int, started: float
) -> Callable[[str, ProbeResult], None] | None:
    """The per-result hook for probe_files: counts results, tells `progress`."""
    if progress is None:
        return None
    scanned = already
    progress(ScanProgress(scanned, total, time.monotonic() - started))

    def report(_key: str, _result: ProbeResult) -> None:
        nonlocal scanned
        scanned += 1
        if scanned < total:  # the last one is reported once the scan is complete
            progress(ScanProgress(scanned, total, time.monotonic() - started))

    return report


class StderrProgress:
    """A progress callback printing one line like `scan: 1200/240000 videos (0.5 %), 12 s,
    about 2400 s left` to `stream` (default stderr), at most every `interval_seconds` (and
    always for the last one); on a terminal the line is rewritten in place."""

    def __init__(self, stream: TextIO | None = None, interval_seconds: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.interval_seconds = interval_seconds
        self._last_shown = -float("inf")

    def __call__(self, progress: ScanProgress) -> None:
        done = progress.videos_scanned >= progress.videos_total
        if not done and progress.seconds - self._last_shown < self.interval_seconds:
            return
        self._last_shown = progress.seconds
        in_place = self.stream.isatty()
        end = "\n" if done or not in_place else ""
        self.stream.write(("\r" if in_place else "") + format_progress(progress) + end)
        self.stream.flush()


def format_progress(progress: ScanProgress) -> str:
    total = progress.videos_total
    percent = 100.0 * progress.videos_scanned / total if total else 100.0
    line = (f"scan: {progress.videos_scanned}/{total} videos ({percent:.1f} %), "
            f"{progress.seconds:.0f} s")
    left = progress.seconds_left
    return line if left is None else f"{line}, about {left:.0f} s left"


def _video_info(target: _Target, facts: ProbeFacts) -> VideoInfo:
    shared = {f: getattr(facts, f) for f in ProbeFacts.__dataclass_fields__ if f != "counted_by"}
    return VideoInfo(
        name=target.name,
        rel_path=target.rel_path,
        path=target.path,
        size_bytes=target.size_bytes,
        mtime_ns=target.mtime_ns,
        identity=(target.device, target.inode),
        access=target.access,
        **shared,
    )


# ---------------------------------------------------------------------------- names


def _list_candidates(real_root: str, extensions: Iterable[str],
                     limits: MediaLimits) -> list[_Candidate]:
    """Files under `real_root` with a wanted extension, sorted by relative path, each with its
    lstat; hidden files and folders are skipped, symlinked folders and other filesystems (a
    mount inside the dataset, sandfs's own included) are not entered. The walk holds each
    folder by its descriptor, so a folder swapped for a link meanwhile leads nowhere else.
    ScanTooLarge past `limits.max_scan_files` files."""
    wanted = {"." + ext.lower().lstrip(".") for ext in extensions}
    root_device = os.stat(real_root).st_dev
    candidates, listed = [], 0
    for dir_path, dir_names, file_names, dir_fd in os.fwalk(real_root, onerror=_log_walk_error):
        dir_names[:] = [d for d in dir_names if not d.startswith(".")
                        and _same_device(d, dir_fd, dir_path, root_device)]
        listed += len(file_names)
        if listed > limits.max_scan_files:
            raise ScanTooLarge(f"dataset {real_root} holds more than max_scan_files="
                               f"{limits.max_scan_files} files (SANDFS_MAX_SCAN_FILES)")
        rel_dir = os.path.relpath(dir_path, real_root)
        for file_name in file_names:
            ext = os.path.splitext(file_name)[1]
            if file_name.startswith(".") or ext.lower() not in wanted:
                continue
            rel_path = file_name if rel_dir == "." else f"{rel_dir}/{file_name}"
            rel_path = rel_path.replace(os.sep, "/")
            candidates.append(_Candidate(rel_path, rel_path[: len(rel_path) - len(ext)],
                                         _lstat(file_name, dir_fd)))
    candidates.sort(key=lambda c: c.rel_path)
    return candidates


def _same_device(name: str, dir_fd: int, dir_path: str, device: int) -> bool:
    try:
        if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_dev == device:
            return True
    except OSError:
        return True  # fwalk meets the error again and reports it
    WALK_WARNINGS.warning("not scanning %s: another filesystem",
                          ascii(os.path.join(dir_path, name)))
    return False


def _lstat(name: str, dir_fd: int) -> os.stat_result | OSError:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as error:
        return error


def _log_walk_error(error: OSError) -> None:
    WALK_WARNINGS.warning("cannot list %s: %s", ascii(error.filename), ascii(error.strerror))


def _claim_names(candidates: list[_Candidate]) -> tuple[list[_Candidate], list[BadVideo]]:
    """In sorted order, a file whose VIDEO name is taken by an earlier file, equals the folder
    of an earlier file, or lies under a folder named like an earlier video is a collision."""
    owner_by_name: dict[str, str] = {}  # VIDEO name -> rel_path
    owner_by_folder: dict[str, str] = {}  # folder path -> first rel_path in it
    named, bad = [], []
    for candidate in candidates:
        folders = _ancestor_folders(candidate.name)
        clash = owner_by_name.get(candidate.name) or owner_by_folder.get(candidate.name)
        clash = clash or next((owner_by_name[f] for f in folders if f in owner_by_name), None)
        if clash:
            bad.append(
                BadVideo(candidate.rel_path, "name_collision", f"name collides with {clash}")
            )
            continue
        owner_by_name[candidate.name] = candidate.rel_path
        for folder in folders:
            owner_by_folder.setdefault(folder, candidate.rel_path)
        named.append(candidate)
    return named, bad


def _ancestor_folders(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# ---------------------------------------------------------------------------- stat checks


def _check_file(real_root: str, candidate: _Candidate, limits: MediaLimits) -> _Target | BadVideo:
    """Vets a candidate by its stat only: nothing is opened for reading here. A symlink is
    followed to its target, which must be a regular file under the root, reached through no
    further link."""
    path = os.path.join(real_root, candidate.rel_path)

    def bad(reason: str, detail: str) -> BadVideo:
        return BadVideo(candidate.rel_path, reason, detail)

    file_stat = candidate.link_stat
    linked = not isinstance(file_stat, OSError) and stat.S_ISLNK(file_stat.st_mode)
    if linked:
        path = os.path.realpath(path)
        file_stat = _stat_no_symlinks(path)
    if isinstance(file_stat, OSError):
        return bad("open_invalid", f"cannot stat: {file_stat.strerror}")
    if not stat.S_ISREG(file_stat.st_mode):
        return bad("not_regular", f"not a regular file ({_file_kind(file_stat.st_mode)})")
    if linked and os.path.commonpath([real_root, path]) != real_root:
        return bad("outside_root", "symlink resolves outside the dataset root")
    if not os.access(path, os.R_OK):  # a daemon that is not root: out of the listing, as a
        # root daemon's owner filter leaves it (a probe's refusal would keep its slots)
        return bad(PERMISSION_DENIED, f"the daemon's user (uid {os.geteuid()}) cannot read it")
    if file_stat.st_size == 0:
        return bad("open_invalid", "empty file")
    if file_stat.st_size > limits.max_file_bytes:
        return bad(
            "too_large", f"{file_stat.st_size} bytes > max_file_bytes {limits.max_file_bytes}"
        )
    return _Target(
        candidate.rel_path, candidate.name, path, file_stat.st_size, file_stat.st_mtime_ns,
        file_stat.st_dev, file_stat.st_ino,
        (file_stat.st_uid, file_stat.st_gid, file_stat.st_mode),
    )  # fmt: skip


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
