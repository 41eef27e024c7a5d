"""Dataset scan: find the videos under a root, vet each file, count its frames.

Order of checks, cheapest and safest first (1 and 2 in walk.py):
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

import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from threading import Event
from typing import TextIO

from sandfs.media.probebook import ProbeBook, ProbeQueue
from sandfs.media.records import FACT_FIELDS
from sandfs.media.resulttext import result_from_text, result_text
from sandfs.media.scan_index import (
    NO_INDEX,
    UNREADABLE,
    KnownRows,
    ListedRows,
    is_video_text,
    read_index,
    save_index,
)
from sandfs.media.scan_workers import (
    DEFAULT_PACE,
    STOP_POLL_SECONDS,
    ProbeJob,
    ProbeWorkers,
    ScanPace,
    ScanStopped,
    check_stop,
    probe_files,
)
from sandfs.media.types import (
    DECODING,
    BadVideo,
    DatasetScan,
    ListedVideo,
    MediaLimits,
    NamedOnce,
    ProbeFacts,
    ProbeFailure,
    ProbeResult,
    ScanProgress,
    VideoFacts,
    VideoInfo,
)
from sandfs.media.walk import WalkRecord, checked_again, vetted_targets
from sandfs.runtime import trim_free_memory

log = logging.getLogger(__name__)

ProgressCallback = Callable[[ScanProgress], None]
# The index's entries no plan asked for yet are read (and their files checked) this many at a
# time, each slice followed by a pause 9 times its CPU (and none read while a reader waits for
# a batch): the startup's planning threads want the GIL meanwhile, and a plan reads what it
# needs itself. Read at 20 ms a slice, a warm mount of 250,000 videos served its first batch
# after 18.6 s; without the background reads, 9.5 s.
RESOLVE_SLICE = 2_000
RESOLVE_PAUSE_S = 0.02
RESOLVE_IDLE = 9
# A scan held behind its readers may take hours: what it probed is saved in the index this
# often, and when it is stopped, so that the next mount is warm for it. Not sooner: saving
# 250,000 rows took 0.8 CPU-s, mostly with the GIL held, and an unheld cold scan of them
# ends within 90 s of launch without one.
SAVE_EVERY_S = 300.0


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
                started=started, texts=listing.found)
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
    pace: ScanPace = DEFAULT_PACE,
) -> tuple[DatasetScan, threading.Thread]:
    """A scan that returns once `root` is listed and vetted by name and stat (and the index
    read): its `listed` files are what plans place (docs/contract.md#lazy-scan), its `probes`
    fill in from the returned thread (started), which probes what planning waits for first,
    then in the readers' order, its workers shared out as `pace` says. `videos` and `bad` hold
    what is known at return. Setting `stop` ends the thread soon (its waiters get
    ScanStopped); the caller joins it. Progress as for `scan_dataset`, from the thread."""
    listing = _Listing.of(root, extensions, limits, index_path, stop, defer=True)
    queue = ProbeQueue(listing.jobs(), pace.ahead_videos, pace.held_every_s,
                       max(1, pace.background_in_flight // 2))  # one message while held
    own = ProbeWorkers(0)
    try:  # until the thread owns them: the queue's waker pipe, the workers handed over
        listing.book.queue = queue
        report = _progress_reporter(progress, listing.book.probed, len(listing.targets),
                                    listing.began)
        num_probed = len(queue)
        own = own if started is None else started.hand_over(workers)
        on_result = listing.recorder(report)  # once: it maps every listed file by name
        thread = threading.Thread(target=_probe_rest, name="lazy-scan", daemon=True,
                                  args=(listing, queue, own, progress, num_probed,
                                        partial(probe_files, queue, listing.limits, workers,
                                                on_result=on_result, stop=stop, pace=pace,
                                                texts=listing.found)))
        thread.start()
    except BaseException:
        queue.close()
        own.close()
        raise
    return listing.partial(), thread


def _probe_rest(listing: _Listing, queue: ProbeQueue, own: ProbeWorkers,
                progress: ProgressCallback | None, num_probed: int,
                probe: Callable[..., object]) -> None:
    """The lazy scan's thread: probes what the index does not answer (`own` workers first),
    then reads the index's answers a slice at a time, probing damaged entries."""
    with own, contextlib.closing(queue):
        try:
            probe(started=own)
            # then the index's answers no plan asked for yet, a slice at a time: those
            # asked for are read by whoever asks, a damaged one's file probed at once
            cpu = time.thread_time()
            while listing.book.resolve_some(RESOLVE_SLICE):
                if queue:
                    probe()
                check_stop(listing.book.stop)
                time.sleep(max(RESOLVE_PAUSE_S, RESOLVE_IDLE * (time.thread_time() - cpu)))
                while queue.held:  # a reader waits: a plan reads what it needs itself
                    if queue:  # a damaged entry a plan waits for
                        probe()
                    check_stop(listing.book.stop)
                    queue.woken(STOP_POLL_SECONDS)  # the last reader out: the gap is ours
                cpu = time.thread_time()
            probe()  # damaged entries found meanwhile (none: returns at once)
        except ScanStopped:
            listing.save_partial()
            return
        except BaseException as error:  # the waiters hear of it, the log too
            log.error("probing %s failed: %s", ascii(listing.real_root), error)
            listing.book.fail(error)
            return
    listing.finish(progress, num_probed)
    listing.let_go()
    trim_free_memory()  # what it let go, and the probes' messages: not allocated again


@dataclass(slots=True)
class _Listing:
    """A dataset listed and vetted, its probe results filling in (`book`; `found`, for the
    index). One writer: the thread that probes."""

    real_root: str
    limits: MediaLimits
    targets: NamedOnce  # by name
    refused: list[BadVideo]  # by name or stat
    book: ProbeBook
    # rel_path -> each result as the index keeps it: a usable video's index text (made by
    # its worker, or the index's own), a failure as itself. Records of 250,000 results kept
    # beside their texts, made while serving and planning went on, held ~110 MB to the
    # scan's end, and pymalloc's pools stayed mapped once they were let go
    found: dict[str, str | ProbeFailure]
    index_path: str | os.PathLike[str] | None
    began: float
    root_device: int  # the root's st_dev: the index's rows describe files of this device
    # what the walk listed (a past walk's, if it held), its names left out: those of the
    # targets and the refused, made again when the index is saved (250,000: ~17 MB kept)
    walked: WalkRecord | None
    decoded: int = 0  # probed files whose packets were not trusted
    # index hits read when asked for (not read yet): rel_path -> (listed, its result's text)
    deferred: Mapping[str, tuple[ListedVideo, str]] = field(default_factory=dict)
    index_as_is: bool = False  # the index holds exactly these results: not written again
    digest: str | None = None  # the listing's `listing_digest`, as the index gave it
    saved_at: float = 0.0  # monotonic: when the index was last saved partway
    unsaved: int = 0  # results probed since
    # the facts videos share (a codec, a time base, equal frame pts and keyframes), one object
    # each: 250,000 videos' copies, unpickled from the probes, held ~80 MB
    shared: dict[str, dict] = field(default_factory=lambda: {
        f: {} for f in (*SHARED_FACTS, "facts")})

    @classmethod
    def of(cls, root: str | os.PathLike[str], extensions: Iterable[str],
           limits: MediaLimits | None, index_path: str | os.PathLike[str] | None,
           stop: Event | None, *, defer: bool = False) -> _Listing:
        """`defer`: a usable video's index entry is read when its result is first asked for
        (a lazy scan: 100,000 entries took 2.6 s before serving); a bad one's at once. A lazy
        scan lists a usable video the index holds by its name alone, its stat taken from the
        index and checked when its entry is read (docs/contract.md#warm-listing)."""
        began = time.monotonic()
        limits = limits or MediaLimits.from_env()
        real_root = os.path.realpath(root)
        if not os.path.isdir(real_root):
            raise NotADirectoryError(f"dataset root is not a directory: {os.fspath(root)!r}")
        stored = read_index(index_path, limits) if index_path else NO_INDEX
        root_device = os.stat(real_root).st_dev
        # another device number (a remount, a restore): the rows' stats describe no file here
        warm = defer and stored.root_device == root_device
        known = KnownRows(stored.listed(sys.intern(real_root + "/"), limits) if warm
                           else ListedRows([], [], []))
        targets, refused, walked = vetted_targets(real_root, extensions, limits, stop,
                                                  *((known, stored.walked) if warm else ()))
        later = known.hits  # index hits read when asked for
        book = ProbeBook(targets, stop)
        listing = cls(real_root, limits, targets, refused, book, {}, index_path, began,
                      root_device, walked and dataclasses.replace(walked, names=[]))
        listing.saved_at = began
        for bad in refused:  # a listed name that collides is no target
            later.pop(bad.rel_path, None)
        numbers = {} if len(later) == len(targets) else stored.numbers()
        hits = [] if not numbers else [  # a warm listing's are all in `later`
            (t, stored.results[row]) for t in targets
            if t.rel_path not in later and (row := numbers.get(t.rel_path)) is not None
            and stored.describes(row, t)]
        hit_count = len(later) + len(hits)
        # saved partway with the stat listed (another device's names no file here)
        later |= {t.rel_path: (t, text) for t, text in hits if defer and is_video_text(text)}
        listing.deferred = later  # an entry let go once read: 100,000 rows' texts, 34 MB
        book.defer_all(later, lambda rel_path: listing.from_index(rel_path,
                                                                  *later.pop(rel_path)))
        # an index without the digest (written before it was stored) is written again once
        listing.index_as_is = (hit_count == len(targets) == len(stored)  # a damaged entry: not
                               and stored.root_device == root_device
                               and stored.digest is not None  # nor a walk it does not hold
                               and walked in (None, stored.walked))
        listing.digest = stored.digest if listing.index_as_is else None  # the listing: its rows
        for target, text in hits:
            if target.rel_path not in later and (
                    result := listing.parsed(target, text)) is not None:
                listing.record(target.rel_path, target, result, text)
        return listing

    def let_go(self) -> None:
        """The scan is complete and its index saved: what it found and the shared facts'
        lookup are not read again (the book holds each video's VideoInfo)."""
        for held in (self.found, *self.shared.values()):
            held.clear()  # in place: the probes' call holds `found` until the thread ends

    def parsed(self, target: ListedVideo, text: str) -> ProbeResult | None:
        """An index row's result; None for a damaged one (then the file is probed)."""
        try:
            return result_from_text(text)
        except UNREADABLE as error:
            log.warning("ignoring the scan index's entry for %s: %s", ascii(target.rel_path),
                        ascii(repr(error)))
            self.index_as_is = False
            return None

    def from_index(self, rel_path: str, target: ListedVideo, text: str
                   ) -> VideoInfo | BadVideo | None:
        """A deferred index hit (`rel_path`: its key, the index's string), in whichever thread
        asks first; a damaged entry's file is probed first of all (None). The file is
        checked first (a lazy scan's listing took its stat from the index): found bad if it
        changed since."""
        if (bad := self._changed(rel_path, target)) is not None:
            return bad
        result = self.parsed(target, text)
        if result is None:
            self.book.queue.extendleft([ProbeJob(rel_path, target.path, target.identity)])
            return None
        self.found[rel_path] = text  # the index's own string: kept, not copied
        return self._probed(target, result)

    def _changed(self, rel_path: str, target: ListedVideo) -> BadVideo | None:
        """Why `target`, as listed, is not that file any more (None: it is): its result, a
        failure the next scan does not keep, lists it afresh."""
        why = checked_again(self.real_root, target, self.limits)
        if why is None:
            return None
        failure = ProbeFailure(*why, lasting=False)
        self.index_as_is = False
        self.found[rel_path] = failure
        return BadVideo(target.rel_path, failure.reason, failure.detail)

    def record(self, key: str, target: ListedVideo, result: ProbeResult,
               text: str | None = None) -> None:
        """`result` (`text`: its index text) of `target`, `key` its rel_path (a string held
        already: its job's, its index row's). A worker's text is in `found` already (put by
        `probe_files`); a usable result without one gets it here."""
        probed = self._probed(target, result)
        if isinstance(result, ProbeFailure):
            self.found[key] = result
        elif key not in self.found:
            self.found[key] = text or result_text(result)
        self.book.record(target.rel_path, probed)

    def _probed(self, target: ListedVideo, result: ProbeResult) -> VideoInfo | BadVideo:
        if isinstance(result, ProbeFailure):
            return BadVideo(target.rel_path, result.reason, result.detail)
        return _video_info(target, result, self.shared)

    def jobs(self) -> list[ProbeJob]:
        """The files the index did not answer for, by rel_path."""
        if len(self.found) + len(self.deferred) == len(self.targets):
            return []  # a warm listing's every file (the two hold targets, never both)
        return [ProbeJob(t.rel_path, t.path, t.identity) for t in self.targets
                if t.rel_path not in self.found and t.rel_path not in self.deferred]

    def recorder(self, report: Callable[[str, ProbeResult], None] | None
                 ) -> Callable[[str, ProbeResult], None]:
        """The per-result hook for probe_files: into the book, then `report`."""
        by_rel: dict[str, ListedVideo] = {}  # made at the first result: a warm mount has none

        def record(key: str, result: ProbeResult) -> None:
            self.decoded += isinstance(result, ProbeFacts) and result.counted_by.startswith(
                DECODING)
            if not by_rel:
                by_rel.update((t.rel_path, t) for t in self.targets)
            self.record(key, by_rel[key], result)
            self.unsaved += 1
            if time.monotonic() - self.saved_at >= SAVE_EVERY_S:
                self.save_partial()
            if report is not None:
                report(key, result)

        return record

    def partial(self, num_probed: int = 0) -> DatasetScan:
        """What is known now, and the listing a plan places."""
        videos = sorted(self.book.usable(), key=attrgetter("name"))
        bad = sorted([*self.refused, *self.book.bad()], key=lambda b: b.rel_path)
        return DatasetScan(self.real_root, tuple(videos), tuple(bad), num_probed,
                           self.book.listed, self.book, self.digest)

    def save_partial(self) -> None:
        """The index as far as the scan got (only if it probed something since the last
        save): the results known, and the rows of the index not read yet (with the stat the
        listing took: `of`); the files missing are listed afresh and probed by the next scan.
        Planning threads read rows meanwhile: copies (one missing from both is probed again
        next time)."""
        self.saved_at = time.monotonic()
        if not self.index_path or not self.unsaved:
            return
        self.unsaved = 0
        found = dict(self.found)
        save_index(self.index_path, self.limits, self.real_root, {
            t.rel_path: (t, found[t.rel_path]) for t in self.targets
            if t.rel_path in found}, self.root_device, dict(self.deferred), self._walk())

    def _walk(self) -> WalkRecord | None:
        """The walk's record, its names those of the listing's files (in no order)."""
        return self.walked and dataclasses.replace(self.walked, names=[
            *(t.rel_path for t in self.targets), *(b.rel_path for b in self.refused)])

    def finish(self, progress: ProgressCallback | None, num_probed: int) -> DatasetScan:
        """Every file probed: the index saved, the bad ones logged, the scan complete."""
        total = len(self.targets)
        if self.index_path and not (self.index_as_is and num_probed == 0):
            save_index(self.index_path, self.limits, self.real_root, {
                t.rel_path: (t, self.found[t.rel_path]) for t in self.targets},
                self.root_device, walked=self._walk())
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


# (the frame size too: 320 and 240 are an int object a video otherwise, 32 bytes)
SHARED_FACTS = ("frame_pts", "time_base", "keyframe_indices", "codec", "pix_fmt", "width",
                "height", "num_frames")


def _video_info(target: ListedVideo, probed: ProbeFacts, interned: dict[str, dict]
                ) -> VideoInfo:
    """`target` with its probe's facts, each shared with the videos probed alike, and the
    facts as a whole too (a dataset of one camera's clips: one VideoFacts). `interned`: field
    -> the values seen, each the object every equal one becomes (a dict's setdefault: safe
    from the scan's and the planning threads at once)."""
    shared = {f: getattr(probed, f) for f in FACT_FIELDS}
    for name in SHARED_FACTS:
        shared[name] = interned[name].setdefault(shared[name], shared[name])
    # the facts whole by their shared parts' ids (kept alive by `interned`, cleared with it):
    # hashing the facts again, their Fraction and pts, cost ~2 us a video
    key = (*map(id, (shared[name] for name in SHARED_FACTS)), shared["seekable"],
           shared["rotation"], shared["stream_index"])
    facts = interned["facts"].get(key)
    if facts is None:
        facts = interned["facts"].setdefault(key, VideoFacts(**shared))
    return VideoInfo.of(target, facts)
