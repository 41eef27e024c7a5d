"""The probe results of a listed dataset, by relative path, as they come.

A full scan fills its book before it returns; a lazy one (`scan.start_lazy_scan`) returns once
the dataset is listed and a background thread fills the book, probing first what a planning
thread waits for (`result`, `want`), then what the plan reads next (`follow`), then the rest
by name. Planning threads wait on the videos they plan; the event loop asks `known` only.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from threading import Event

from sandfs.media.records import listing_root
from sandfs.media.scan_workers import (
    ANY,
    BACKGROUND,
    FRONT,
    STOP_POLL_SECONDS,
    ProbeJob,
    Waker,
    check_stop,
)
from sandfs.media.types import BadVideo, ListedVideo, VideoInfo
from sandfs.runtime import settle_collector

Probed = VideoInfo | BadVideo
WAIT_SLICE = 2_000  # deferred results read by `wait_all` between checks of its stop
# Results live as long as the mount: frozen out of the collector's walks once this many are
# in, then at each doubling (`runtime.settle_collector`, garbage cycles collected first: a
# freeze keeps one until a task ends). A cold scan of 250,000 videos otherwise left 16 full
# collections walking them all, 3.3 s with the GIL held, the last ones 0.4-0.5 s each.
SETTLE_FIRST = 10_000


class ProbeLost(RuntimeError):
    """The background probe failed (a worker could not start): nothing will be probed."""


class ProbeQueue:
    """The probe jobs a lazy scan has not sent yet, in the order it sends them; other threads
    reorder it. What planning waits for goes first (`first`), then the orders the readers
    read in (`follow`, a chunk of each in turn), then the rest by name. `take(FRONT)` is a
    front worker's (scan_workers.ScanPace): what is waited for, and the next `ahead_videos`
    of the followed orders once a wait found its video not probed (the readers caught up with
    the scan); `take(BACKGROUND)` the followed orders and the rest, never what is waited for;
    `take()` any job. `unpace()`: front workers take any job from then on. While a reader
    waits for a batch (`readers_wait`), the background takes `held_jobs` at most every
    `held_every_s` (so the scan still ends beside a reader that always waits): its results
    cost the daemon's GIL that the waiting reader's jobs want, and the front still probes
    ahead of the readers' parts."""

    FOLLOW_CHUNK = 256  # keys taken from a followed order at a time

    def __init__(self, jobs: Iterable[ProbeJob], ahead_videos: int = 0,
                 held_every_s: float = math.inf, held_jobs: int = 1) -> None:
        self._lock = threading.Lock()
        self._jobs = {job.key: job for job in jobs}  # not sent yet
        self._urgent: deque[str] = deque()  # waited for: sent first
        self._waited: set[str] = set()  # those of them not sent yet
        self._followed: deque[Iterator[str]] = deque()  # orders read in, a chunk of each in turn
        self._next: deque[str] = deque()  # the chunk taken from them
        self._order: deque[str] = deque(self._jobs)  # then these; a key sent already is skipped
        self.ahead_videos = ahead_videos
        self._lead = 0  # followed jobs a front worker may take now
        self._paced = True  # False: a front worker takes any job
        self._background: dict[str, ProbeJob] = {}  # sent to a background worker, no result
        self._readers_waiting = 0  # readers blocked on a batch: the background holds
        self.held_every_s, self.held_jobs = held_every_s, held_jobs
        self._held_next = time.monotonic() + held_every_s  # when it may take while held
        self._held_left = 0  # jobs it may take now while held
        self.waker = Waker()  # poked when a job is waited for; closed with the queue

    def first(self, keys: Iterable[str]) -> None:
        """Send these next (in their order), before anything asked for earlier."""
        with self._lock:
            keys = [k for k in keys if k in self._jobs or k in self._background]
            for key in keys:  # one in a niced pipe: a front worker probes it too
                self._jobs.setdefault(key, self._background.get(key))
            self._urgent.extendleft(reversed(keys))
            self._waited.update(keys)
            if keys:  # waited for and not probed: the scan is behind its readers
                self._lead = self.ahead_videos
                self.waker.poke()

    def follow(self, keys: Iterable[str]) -> None:
        """After the urgent ones, send these in this order (taken as they are sent: a lazy
        iterable is fine), a chunk in turn with the orders followed before; then the others
        by name."""
        with self._lock:
            self._followed.append(iter(keys))

    def take(self, role: str = ANY) -> ProbeJob | None:
        """The next job `role` takes (None: none left, or none it takes now)."""
        with self._lock:
            front = role == FRONT and self._paced
            held = role == BACKGROUND and self._paced and self._readers_waiting > 0
            if held and not self._held_share():
                return None
            job = None if role == BACKGROUND else self._pop(self._urgent)
            if job is None and (not front or self._lead > 0):
                job = self._pop_followed()
                self._lead -= job is not None and front
            if job is None and not front:
                job = self._pop(self._order)
            if job is not None and role == BACKGROUND:
                self._background[job.key] = job
                self._held_left -= held  # a slot of the share spent only on a job
            elif job is not None:  # with a front worker now: a wait sends it no further
                self._background.pop(job.key, None)
            return job

    def settled(self, key: str) -> None:
        """`key`'s result came: not sent again (a copy sent to a front worker too)."""
        with self._lock:
            self._background.pop(key, None)
            self._jobs.pop(key, None)
            self._waited.discard(key)

    def unpace(self) -> None:
        """Every result is waited for (a blocking scan): front workers take any job."""
        with self._lock:
            self._paced = False
            self.waker.poke()

    @contextlib.contextmanager
    def readers_wait(self) -> Iterator[None]:
        """A reader waits for a batch in here (any thread): the background takes nothing.
        The last one out wakes the scan's thread: a reader bound by decoding leaves the
        background only short gaps between its waits. A share's slots left are not carried
        into the next hold (which would start with two shares)."""
        with self._lock:
            self._readers_waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._readers_waiting -= 1
                if not self._readers_waiting:
                    self._held_left = 0
                    self.waker.poke()

    def _held_share(self) -> bool:
        """Under the lock, while held: is a slot of the background's share left now?"""
        now = time.monotonic()
        if not self._held_left and now >= self._held_next:
            self._held_left, self._held_next = self.held_jobs, now + self.held_every_s
        return self._held_left > 0

    def held_seconds(self, room: bool) -> float:
        """How soon a background worker that has `room` (took what it could just now) may
        take a job again while held. inf: not held, no room (its reply wakes the scan), or a
        slot left that found no job (those left are a front worker's): the scan's thread must
        not poll, holding the GIL, while the reader it holds for waits."""
        with self._lock:
            if not (room and self._paced and self._readers_waiting > 0) or self._held_left:
                return math.inf
            return max(0.0, self._held_next - time.monotonic())

    def woken(self, seconds: float) -> None:
        """Until the waker is poked (the last reader out, a job waited for) or `seconds`."""
        if select.select([self.waker], [], [], seconds)[0]:
            self.waker.drain()

    @property
    def held(self) -> bool:
        """Does the background hold now (a reader waits, the scan is paced)?"""
        with self._lock:
            return self._paced and self._readers_waiting > 0

    def _pop(self, keys: deque[str]) -> ProbeJob | None:
        """The next of `keys` not sent yet; none waited for unless from `_urgent`."""
        while keys:
            key = keys.popleft()
            if key in self._waited and keys is not self._urgent:
                continue  # a front worker's: in _urgent too
            job = self._jobs.pop(key, None)
            if job is not None:
                self._waited.discard(key)
                return job
        return None

    def _pop_followed(self) -> ProbeJob | None:
        while True:
            job = self._pop(self._next)
            if job is not None or not self._followed:
                return job
            order = self._followed.popleft()
            chunk = list(itertools.islice(order, self.FOLLOW_CHUNK))
            if chunk:
                self._next.extend(chunk)
                self._followed.append(order)

    def extendleft(self, jobs: Iterable[ProbeJob]) -> None:
        """Jobs sent to a worker that died before it started them (or a background worker's
        that failed): sent again first, to a front worker."""
        with self._lock:
            for job in jobs:
                self._jobs[job.key] = job
                self._urgent.appendleft(job.key)
                self._waited.add(job.key)

    def __len__(self) -> int:
        return len(self._jobs)

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def close(self) -> None:
        """The scan's thread ends: its jobs' tables are let go (a dict emptied by pops keeps
        its size: 21 bytes a video, the book holding the queue for the mount's life)."""
        with self._lock:
            self._jobs, self._background = {}, {}
        self.waker.close()


class ProbeBook:
    """`listed`: the files a plan places (sorted by name); each one's probe result once known:
    its VideoInfo, or the BadVideo that keeps it out of every view (docs/contract.md#lazy-scan).
    One writer: the scan's thread (`record`, `fail`)."""

    def __init__(self, listed: Sequence[ListedVideo], stop: Event | None = None,
                 queue: ProbeQueue | None = None) -> None:
        self.listed = listed if isinstance(listed, tuple) else tuple(listed)  # NamedOnce kept
        self.stop = stop  # set: waiters raise ScanStopped
        self.queue = queue  # a lazy scan's jobs not sent yet (None: nothing left to probe)
        # by root + rel_path: a video's key is its path, the string its record holds (keyed
        # by rel_path, each key was a string of its own: ~65 bytes a video)
        self._root = listing_root(self.listed)
        self._results: dict[str, Probed] = {}
        self._bad: dict[str, BadVideo] = {}  # those of the results
        # found in the scan index, read when asked for (or by the scan's thread): what to call
        # for the result, None when it must be probed after all (its job queued again)
        self._deferred: dict[str, Callable[[str], Probed | None]] = {}
        self._resolving = 0  # deferred results being read now
        self._changed = threading.Condition()
        self._failure: BaseException | None = None
        self._settle_at = SETTLE_FIRST  # results in at the next freeze

    @classmethod
    def of(cls, videos: Sequence[VideoInfo]) -> ProbeBook:
        """A book of videos all probed and usable (a plan made straight from VideoInfo)."""
        book = cls(videos)
        book._results = {book._held_key(v.rel_path, v): v for v in videos}
        return book

    def record(self, rel_path: str, result: Probed) -> None:
        with self._changed:
            self._put(rel_path, result)
            self._changed.notify_all()

    def _key(self, rel_path: str) -> str:
        root = self._root
        return rel_path if root is None else root + rel_path

    def _held_key(self, rel_path: str, result: Probed) -> str:
        """`rel_path`'s key, as the video's own string where it is its path (its root is
        the book's: roots are shared objects)."""
        if self._root is not None and isinstance(result, VideoInfo) and result.root is self._root:
            return result.path
        return self._key(rel_path)

    def _put(self, rel_path: str, result: Probed) -> None:
        """Under the lock."""
        self._results[self._held_key(rel_path, result)] = result
        if isinstance(result, BadVideo):
            self._bad[rel_path] = result
        if len(self._results) >= self._settle_at:
            self._settle_at *= 2
            settle_collector(collect=True)

    def defer(self, rel_path: str, resolve: Callable[[], Probed | None]) -> None:
        """`rel_path`'s result is `resolve()`'s, read when first asked for (before the book is
        shared: the listing's thread)."""
        self._deferred[rel_path] = lambda _: resolve()

    def defer_all(self, rel_paths: Iterable[str], resolve: Callable[[str], Probed | None]
                  ) -> None:
        """`defer` of each, `resolve(rel_path)` the result (one callable for all: 250,000)."""
        self._deferred.update(dict.fromkeys(rel_paths, resolve))

    def resolve_all(self) -> None:
        """Read every deferred result now, and wait for those other threads are reading: a
        damaged entry's job is queued by then."""
        while self.resolve_some(len(self._deferred) or 1):
            pass

    def resolve_some(self, count: int) -> bool:
        """Read up to `count` deferred results (the scan's thread, a slice at a time beside
        the planning threads: 250,000 entries are 2.5 s of CPU that held the first windows'
        planning back); False once none is left to read or being read."""
        for rel_path in list(itertools.islice(self._deferred, count)):
            self._resolve(rel_path)
        if self._deferred:
            return True
        with self._changed:
            while self._resolving:
                self._changed.wait(STOP_POLL_SECONDS)
        return False

    def _resolve(self, rel_path: str) -> Probed | None:
        with self._changed:
            resolve = self._deferred.pop(rel_path, None)
            if resolve is None:
                return None
            if not self._deferred:  # emptied by pops, it kept its size: 21 bytes a video
                self._deferred = {}
            self._resolving += 1
        found = None
        try:
            found = resolve(rel_path)
            return found
        finally:
            with self._changed:  # one lock for both: 250,000 entries are read at a warm start
                if found is not None:
                    self._put(rel_path, found)
                self._resolving -= 1
                self._changed.notify_all()

    def fail(self, error: BaseException) -> None:
        with self._changed:
            self._failure = error
            self._changed.notify_all()

    def known(self, rel_path: str) -> Probed | None:
        return self._results.get(self._key(rel_path))

    def all_known(self) -> bool:
        """Is every listed file's result in, or in the scan index (read without a probe)? A
        thread waiting for one then waits for no worker (read on the event loop: lengths)."""
        return len(self._results) + len(self._deferred) >= len(self.listed)

    def want(self, rel_paths: Iterable[str]) -> None:
        """Probe these next: a planning thread is about to wait for them."""
        if self.queue is not None:
            self.queue.first(rel_path for rel_path in rel_paths
                             if self._key(rel_path) not in self._results)

    def follow(self, rel_paths: Iterable[str]) -> None:
        """An order readers read in (lazy: taken as the scan gets to it): the rest is probed
        in it, ahead of them, in turn with the orders followed before."""
        if self.queue is not None:
            self.queue.follow(rel_paths)

    def readers_wait(self) -> contextlib.AbstractContextManager[None]:
        """Around a reader's wait for a batch: the background scan holds meanwhile."""
        return contextlib.nullcontext() if self.queue is None else self.queue.readers_wait()

    def result(self, rel_path: str) -> Probed:
        """`rel_path`'s result, waiting for its probe (sent next) if need be. Raises
        ScanStopped once the scan stops, ProbeLost when the background probe failed."""
        key = self._key(rel_path)
        found = self._results.get(key) or self._resolve(rel_path)
        if found is not None:
            return found
        self.want([rel_path])
        with self._changed:
            while (found := self._results.get(key)) is None:
                if self._failure is not None:
                    raise ProbeLost(f"probing the dataset failed: {self._failure}")
                check_stop(self.stop)
                self._changed.wait(STOP_POLL_SECONDS)
        return found

    def results_of(self, videos: Sequence[ListedVideo]) -> list[Probed]:
        """`result` of each listed video: those in read at once by their paths (a video
        under the book's root is keyed by its path), the others waited for in turn."""
        get = self._results.get
        if self._root is None:
            found = [get(video.rel_path) for video in videos]
        else:
            found = [get(video.path) for video in videos]
        for place, value in enumerate(found):
            if value is None:
                found[place] = self.result(videos[place].rel_path)
        return found  # type: ignore[return-value]

    def wait_all(self, stop: Event | None = None) -> None:
        """Until every listed file is probed; ScanStopped once this book's or `stop` is
        set, ProbeLost when the background probe failed. The deferred results are read here
        (the scan's thread reads them slowly, beside the startup: a warm mount of a task that
        waits for every probe waited for it)."""
        if self.queue is not None:
            self.queue.unpace()
        while self.resolve_some(WAIT_SLICE):
            check_stop(self.stop)
            check_stop(stop)
        with self._changed:
            while len(self._results) < len(self.listed):
                if self._failure is not None:
                    raise ProbeLost(f"probing the dataset failed: {self._failure}")
                check_stop(self.stop)
                check_stop(stop)
                self._changed.wait(STOP_POLL_SECONDS)

    def usable(self) -> list[VideoInfo]:
        """The usable videos probed so far, in no order (not a walk over every listed
        file: a warm mount's are all deferred when it starts)."""
        with self._changed:
            return [v for v in self._results.values() if isinstance(v, VideoInfo)]

    @property
    def probed(self) -> int:
        return len(self._results)

    @property
    def answered(self) -> int:
        """Results in hand or deferred (a warm listing's index rows, read when asked for)."""
        with self._changed:
            return len(self._results) + len(self._deferred)

    def bad(self) -> list[BadVideo]:
        """The files the probe refused so far (status.json asks on the event loop: not a
        walk over every result, 250,000 of them)."""
        with self._changed:
            found = list(self._bad.values())
        return sorted(found, key=lambda b: b.rel_path)
