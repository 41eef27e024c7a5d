"""The clips no job made yet, by job, as the window's columns less what was taken: a window's
pending clips are its videos' uses (`WindowVideos`' columns) with a byte a use that says it was
taken, and a count a video of those left; not a dict entry and a `WindowUses` a video (~17 bytes
a clip of a window, 5 clips a video; docs/performance.md#a-windows-batches-and-the-board). What
does not fit that shape (a clip pending again, a joining task's clips, a later part of a window
holding a video pending already) is held as before, a sequence a job (`_loose`), and a job is
in one place: its part's columns or the loose ones.

A job is a number (`job_number`: its window, and its video's number in the window's parts, a
part's videos numbered on from the last part's), not a key object a video: urgency's order and
its batches' jobs hold numbers, and a `VideoJobKey` is made when asked for one (`key_of`), with
its number in it (`VideoJobKey.number`) so that a look by key finds it without a hash lookup. A
job held loose has every number it goes by (a part's, or one of its own) mapped to its key.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence, ValuesView

import numpy as np

from sandfs.plan.hashrows import HashNumbers, hashes_of
from sandfs.plan.uses import ClipUse, UseColumns
from sandfs.plan.window import ViewKey
from sandfs.plan.windowvideos import WindowVideos, group_counts
from sandfs.sched.jobs import VideoJobKey


class PendingColumns(Mapping[str, Sequence[ClipUse]]):
    """A planned window's clips to make, by path: its videos' uses but those `taken` (on disk
    already: a byte a use, None: none). What a planning thread hands the board
    (`PlannedWindow.pending`); read by path where a mapping is wanted (`urgency_entries`)."""

    __slots__ = ("columns", "index", "infos", "taken")

    def __init__(self, videos: WindowVideos, taken: bytearray | None = None) -> None:
        """`videos`: a window (or part) as planned (`unchanged`): its columns and paths are
        taken as they are, a later part joining it does not change them."""
        if not videos.unchanged:
            raise ValueError("a window's pending columns are those of its videos as planned")
        columns = videos.columns
        if taken is not None and len(taken) != len(columns.batch):
            raise ValueError(f"{len(taken)} flags for {len(columns.batch)} uses")
        self.columns, self.infos, self.taken = columns, videos.infos, taken
        self.index = videos.path_index()

    def __iter__(self) -> Iterator[str]:
        return (info.path for info in self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def __getitem__(self, path: str) -> Sequence[ClipUse]:
        group = self.index.number(path)
        if group < 0:
            raise KeyError(path)
        return _left(self.columns, group, self.taken)

    def values(self) -> ValuesView[Sequence[ClipUse]]:
        return _Values(self)


class _Values(ValuesView):
    """Each video's clips by group, in order: no path looked up."""

    def __iter__(self):
        pending = self._mapping
        columns, taken = pending.columns, pending.taken
        return (_left(columns, group, taken) for group in range(len(pending)))


def _left(columns: UseColumns, group: int, taken: bytearray | None) -> Sequence[ClipUse]:
    """A group's uses but those taken."""
    uses = columns.group(group)
    if taken is None:
        return uses
    start, end = columns.starts[group], columns.starts[group + 1]
    mask = [not flag for flag in taken[start:end]]
    return uses if all(mask) else uses.select(mask)


class _Part:
    """A window's (or a part's) pending clips as its columns: video g is job `base + g`."""

    __slots__ = ("base", "columns", "infos", "left", "taken")

    def __init__(self, pending: PendingColumns, base: int) -> None:
        self.columns, self.infos = pending.columns, pending.infos
        self.base = base
        self.taken = bytearray(pending.taken) if pending.taken is not None else bytearray(
            len(self.columns.batch))
        flags = np.frombuffer(self.taken, np.uint8)
        self.left = array("i", group_counts(flags == 0, self.columns).tolist())

    def uses(self, group: int) -> Sequence[ClipUse]:
        return _left(self.columns, group, self.taken) if self.left[group] else ()

    def take_group(self, group: int) -> None:
        start, end = self.columns.starts[group], self.columns.starts[group + 1]
        self.taken[start:end] = b"\x01" * (end - start)
        self.left[group] = 0

    def take(self, group: int, spots: set[tuple[ViewKey, int]]) -> None:
        """The group's uses at these (batch, slot) spots are taken."""
        columns, taken = self.columns, self.taken
        key, batch, slot = columns.table.key, columns.batch, columns.slot
        for use in range(columns.starts[group], columns.starts[group + 1]):
            if not taken[use] and (key(batch[use]), slot[use]) in spots:
                taken[use] = 1
                self.left[group] -= 1

    def take_batches(self, gone: Callable[[ViewKey], bool]) -> None:
        """Every use of the batches `gone` is taken."""
        batch = np.frombuffer(self.columns.batch, np.int32)
        key = self.columns.table.key
        rows = [row for row in np.unique(batch).tolist() if gone(key(row))]  # no row made
        if not rows:
            return
        uses = np.isin(batch, rows)
        flags = np.frombuffer(self.taken, np.uint8)
        flags |= uses.astype(np.uint8)  # writes through to `taken`
        self.left = array("i", group_counts(flags == 0, self.columns).tolist())


_WINDOW_SHIFT = 32  # a job number: its window, then its number in the window
_OWN = 1 << 31  # numbers of jobs held loose that no part holds: past any part's
_NUMBER = (1 << _WINDOW_SHIFT) - 1  # a job number's number in its window


def job_number(window: int, number: int) -> int:
    return window << _WINDOW_SHIFT | number


def number_window(job: int) -> int:
    return job >> _WINDOW_SHIFT


class PendingClips(Mapping[VideoJobKey, Sequence[ClipUse]]):
    """By job: its clips no job made yet (`BatchBoard.pending`; the board its only writer).
    Its values are made when read, immutable as the tuples they were: changed by replacing.
    Read by key, or by job number (`has_number`, `key_of`: urgency's)."""

    def __init__(self) -> None:
        self._parts: dict[int, list[_Part]] = {}  # by window
        self._bases: dict[int, list[int]] = {}  # by window: its parts' first numbers
        self._next: dict[int, int] = {}  # by window: the next part's first number
        self._index: dict[int, HashNumbers] = {}  # by window: its parts' videos by path
        self._loose: dict[VideoJobKey, Sequence[ClipUse]] = {}
        self._loose_of: dict[int, VideoJobKey] = {}  # every number of a loose job
        self._own: dict[VideoJobKey, int] = {}  # numbers of jobs no part holds
        self._owned = 0  # own numbers given: never given again

    # -- numbers ----------------------------------------------------------------------------

    def next_number(self, window: int) -> int:
        """The job number of the next part's first video (`add_columns`)."""
        return job_number(window, self._next.get(window, 0))

    def _locate(self, job: int) -> tuple[_Part, int] | None:
        """The part and group of a job number (None: one of a loose job's own)."""
        window, number = job >> _WINDOW_SHIFT, job & _NUMBER
        bases = self._bases.get(window)
        if not bases or number >= _OWN:
            return None
        part = self._parts[window][bisect_right(bases, number) - 1]
        group = number - part.base
        return (part, group) if 0 <= group < len(part.left) else None

    def key_of(self, job: int) -> VideoJobKey:
        """The job's key, its number in it."""
        loose = self._loose_of.get(job)
        if loose is not None:
            return VideoJobKey(loose.window, loose.path, job)
        found = self._locate(job)
        if found is None:
            raise KeyError(job)
        return VideoJobKey(job >> _WINDOW_SHIFT, found[0].infos[found[1]].path, job)

    def number(self, job: VideoJobKey) -> int:
        """The job's number: one its loose clips are mapped under, else its video's in the
        first part holding it, else one of its own."""
        own = self._own.get(job)
        # no path looked up; an own number given before a part held the video is not mapped
        if own is not None and self._loose_of.get(own) == job:
            return own
        found = self._find(job)
        if found is not None:
            return job_number(job.window, found[0].base + found[1])
        return self._own_number(job)

    def _own_number(self, job: VideoJobKey) -> int:
        """A number of the job's own (no part holds it)."""
        own = self._own.get(job)
        if own is None:
            own = self._own[job] = job_number(job.window, _OWN + self._owned)
            self._owned += 1
        return own

    def has_number(self, job: int) -> bool:
        """Whether the job has a clip pending (what urgency asks of every entry it passes):
        `_locate` inlined, a window of one part found without a bisect."""
        loose_of = self._loose_of
        if loose_of and job in loose_of:
            return bool(self._loose[loose_of[job]])
        window = job >> _WINDOW_SHIFT
        bases = self._bases.get(window)
        if not bases:
            return False
        number = job & _NUMBER
        parts = self._parts[window]
        part = parts[bisect_right(bases, number) - 1] if len(parts) > 1 else parts[0]
        group, left = number - part.base, part.left
        return 0 <= group < len(left) and left[group] > 0

    def have_numbers(self, jobs: np.ndarray) -> np.ndarray:
        """`has_number` of each job, a window's parts read at once."""
        jobs = np.asarray(jobs, np.int64)
        keep = np.zeros(len(jobs), bool)
        windows, numbers = jobs >> _WINDOW_SHIFT, jobs & _NUMBER
        for window in np.unique(windows).tolist():
            parts = self._parts.get(window)
            if not parts:
                continue
            left = np.concatenate([np.frombuffer(part.left, np.int32) for part in parts])
            at = np.flatnonzero((windows == window) & (numbers < len(left)))
            keep[at] = left[numbers[at]] > 0  # a window's parts number its videos on
        if self._loose_of:
            for index in np.flatnonzero(np.isin(jobs, list(self._loose_of))).tolist():
                keep[index] = self.has_number(int(jobs[index]))
        return keep

    # -- reading ----------------------------------------------------------------------------

    def _find(self, job: VideoJobKey) -> tuple[_Part, int] | None:
        """The part and group of a job: by the number its key carries, else (a key made
        elsewhere) by its path's hash in the window's index (`_known`), the first part's."""
        if job.number >= 0 and job.number >> _WINDOW_SHIFT == job.window:
            found = self._locate(job.number)
            if found is not None and found[0].infos[found[1]].path == job.path:
                return found
        index = self._index.get(job.window)
        for number in index.numbers(job.path) if index is not None else ():
            found = self._locate(job_number(job.window, number))
            if found is not None and found[0].infos[found[1]].path == job.path:  # no collision
                return found
        return None

    def __getitem__(self, job: VideoJobKey) -> Sequence[ClipUse]:
        loose = self._loose
        if loose and job in loose:
            return loose[job]
        found = self._find(job)
        if found is None or not found[0].left[found[1]]:  # none left: as a key deleted
            raise KeyError(job)
        return found[0].uses(found[1])

    def has(self, job: VideoJobKey) -> bool:
        """Whether the job has a clip pending: no sequence made."""
        loose = self._loose
        if loose and job in loose:
            return bool(loose[job])
        found = self._find(job)
        return found is not None and found[0].left[found[1]] > 0

    def token(self, job: VideoJobKey) -> object:
        """What changes whenever the job's pending clips do (a memo's check)."""
        loose = self._loose
        if loose and job in loose:
            return loose[job]
        found = self._find(job)
        return None if found is None else (id(found[0]), found[0].left[found[1]])

    def __contains__(self, job: object) -> bool:
        if not isinstance(job, VideoJobKey):
            return False
        if job in self._loose:
            return True
        found = self._find(job)
        return found is not None and found[0].left[found[1]] > 0

    def __iter__(self) -> Iterator[VideoJobKey]:
        yield from list(self._loose)
        for window, parts in list(self._parts.items()):
            for part in parts:  # a loose job's groups were taken: none left
                first = job_number(window, part.base)
                yield from (VideoJobKey(window, part.infos[group].path, first + group)
                            for group in np.flatnonzero(part.left).tolist())

    def __len__(self) -> int:
        return len(self._loose) + self._in_parts()

    def jobs(self) -> list[VideoJobKey]:
        """The jobs with a clip pending: a part's are those with uses left (`__iter__`)."""
        loose = self._loose
        return [job for job in self if not loose or job not in loose or loose[job]]

    def count(self) -> int:
        """How many `jobs` there are, without a key a job: status.json asks at every read,
        and at 250,000 videos making a key a job held the event loop for seconds."""
        return sum(1 for clips in self._loose.values() if clips) + self._in_parts()

    def _in_parts(self) -> int:
        return sum(int(np.count_nonzero(np.frombuffer(part.left, np.int32)))
                   for parts in self._parts.values() for part in parts)

    # -- changing (the board) ---------------------------------------------------------------

    def add_columns(self, window: int, pending: PendingColumns,
                    ready: Callable[[ViewKey], bool] | None = None) -> int:
        """A planned window's (or part's) clips, its videos numbered from `next_number`; the
        uses of batches `ready` already taken. A job pending already (a stand-in's clips,
        planned with another part) holds both parts' clips, loose. Its first number."""
        base = self._next.get(window, 0)
        if base + len(pending) > _OWN:
            raise ValueError(f"{base + len(pending)} videos in window {window}: over {_OWN}")
        part = _Part(pending, base)
        if ready is not None:
            part.take_batches(ready)
        for group in self._known(window, part):
            job = VideoJobKey(window, part.infos[group].path)
            self.set(job, self.get(job, ()) + part.uses(group))
            part.take_group(group)
            self._loose_of[job_number(window, base + group)] = job
        self._parts.setdefault(window, []).append(part)
        self._bases.setdefault(window, []).append(base)
        self._next[window] = base + len(pending)
        return job_number(window, base)

    def _known(self, window: int, part: _Part) -> list[int]:
        """Which of the part's videos (of `window`) are pending already, the loose ones by
        key, those of the window's parts by their paths' hashes, sorted, a window's (a window
        is planned in up to a few hundred parts: not each part's looked up for each), and
        then, for a hash found, by the path itself; the new ones join the window's index."""
        paths = [info.path for info in part.infos]
        known = set()
        if self._loose:
            known.update(i for i, path in enumerate(paths)
                         if VideoJobKey(window, path) in self._loose)
        hashes = hashes_of(paths, len(paths))
        index = self._index.get(window, HashNumbers())
        for at in index.held(hashes):  # the path, or a collision
            if self._find(VideoJobKey(window, paths[at])) is not None:
                known.add(at)
        # after the equal ones: an earlier part's found first
        self._index[window] = index.joined(hashes, np.arange(part.base, part.base + len(paths)))
        return sorted(known)

    def set(self, job: VideoJobKey, uses: Sequence[ClipUse]) -> None:
        """The job's pending clips from now on (held loose, by every number it goes by)."""
        if job not in self._loose:
            found = self._find(job)
            if found is not None:
                found[0].take_group(found[1])
                number = job_number(job.window, found[0].base + found[1])
            else:
                number = self._own_number(job)
            self._loose_of[number] = job
        self._loose[job] = uses

    def take(self, job: VideoJobKey, spots: set[tuple[ViewKey, int]]) -> None:
        """The job's clips at these (batch, slot) spots are taken (a job started with them)."""
        loose = self._loose
        if job in loose:
            loose[job] = tuple(u for u in loose[job] if (u.view, u.slot) not in spots)
            return
        found = self._find(job)
        if found is None:
            raise KeyError(job)
        found[0].take(found[1], spots)

    def forget(self, gone: Callable[[ViewKey], bool]) -> None:
        """The clips of the batches `gone` (failed, or planned elsewhere) are pending no more."""
        for job, uses in self._loose.items():
            self._loose[job] = tuple(u for u in uses if not gone(u.view))
        for parts in self._parts.values():
            for part in parts:
                part.take_batches(gone)

    def drop_window(self, window: int) -> None:
        """The window's jobs go (its numbers may be given again)."""
        for table in (self._parts, self._bases, self._next, self._index):
            table.pop(window, None)
        for job in [job for job in self._loose if job.window == window]:
            del self._loose[job]
        self._loose_of = {n: job for n, job in self._loose_of.items() if job.window != window}
        self._own = {job: n for job, n in self._own.items() if job.window != window}
