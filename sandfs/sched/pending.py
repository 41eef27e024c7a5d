"""The clips no job made yet, by job, as the window's columns less what was taken: a window's
pending clips are its videos' uses (`WindowVideos`' columns) with a byte a use that says it was
taken, and a count a video of those left; not a dict entry and a `WindowUses` a video (~17 bytes
a clip of a window, 5 clips a video; docs/performance.md#a-windows-batches-and-the-board). What
does not fit that shape (a clip pending again, a joining task's clips, a later part of a window
holding a video pending already) is held as before, a sequence a job (`_loose`), and a job is
in one place: its part's columns or the loose ones.

A job's key holds its video's number in its part (`VideoJobKey.number`, checked against the
part's own key) so that urgency's many looks find it without a hash lookup.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence, ValuesView

import numpy as np

from sandfs.plan.uses import ClipUse, UseColumns
from sandfs.plan.window import ViewKey
from sandfs.plan.windowvideos import WindowVideos
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
    """A window's (or a part's) pending clips as its columns: `jobs[g]` is video g's job."""

    __slots__ = ("columns", "index", "jobs", "left", "taken")

    def __init__(self, pending: PendingColumns, jobs: Sequence[VideoJobKey]) -> None:
        self.columns, self.index, self.jobs = pending.columns, pending.index, jobs
        self.taken = bytearray(pending.taken) if pending.taken is not None else bytearray(
            len(self.columns.batch))
        flags = np.frombuffer(self.taken, np.uint8)
        starts = _starts(self.columns)
        self.left = array("i", _counts(flags, starts).tolist())

    def uses(self, group: int) -> Sequence[ClipUse]:
        return _left(self.columns, group, self.taken) if self.left[group] else ()

    def take_group(self, group: int) -> None:
        start, end = self.columns.starts[group], self.columns.starts[group + 1]
        self.taken[start:end] = b"\x01" * (end - start)
        self.left[group] = 0

    def take(self, group: int, spots: set[tuple[ViewKey, int]]) -> None:
        """The group's uses at these (batch, slot) spots are taken."""
        columns, taken = self.columns, self.taken
        rows, batch, slot = columns.rows, columns.batch, columns.slot
        for use in range(columns.starts[group], columns.starts[group + 1]):
            if not taken[use] and (rows[batch[use]].view, slot[use]) in spots:
                taken[use] = 1
                self.left[group] -= 1

    def take_batches(self, gone: Callable[[ViewKey], bool]) -> None:
        """Every use of the batches `gone` is taken."""
        rows = [i for i, row in enumerate(self.columns.rows) if gone(row.view)]
        if not rows:
            return
        uses = np.isin(np.frombuffer(self.columns.batch, np.int32), rows)
        flags = np.frombuffer(self.taken, np.uint8)
        flags |= uses.astype(np.uint8)  # writes through to `taken`
        self.left = array("i", _counts(flags, _starts(self.columns)).tolist())


def _starts(columns: UseColumns) -> np.ndarray:
    return np.frombuffer(columns.starts, columns.starts.typecode)


def _counts(taken: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each group's uses not taken."""
    left = np.add.reduceat((taken == 0).astype(np.int64), starts[:-1]) if len(taken) else (
        np.zeros(len(starts) - 1, np.int64))
    left[starts[:-1] == starts[1:]] = 0  # an empty range: reduceat gives the next value
    return left


class PendingClips(Mapping[VideoJobKey, Sequence[ClipUse]]):
    """By job: its clips no job made yet (`BatchBoard.pending`; the board its only writer).
    Its values are made when read, immutable as the tuples they were: changed by replacing."""

    def __init__(self) -> None:
        self._parts: dict[int, list[_Part]] = {}  # by window
        self._hashes: dict[int, np.ndarray] = {}  # by window: its parts' paths' hashes, sorted
        self._loose: dict[VideoJobKey, Sequence[ClipUse]] = {}

    # -- reading ----------------------------------------------------------------------------

    def _find(self, job: VideoJobKey) -> tuple[_Part, int] | None:
        """The part and group of a job: by the number its key carries, else (a key made
        elsewhere) by its path, part by part."""
        parts = self._parts.get(job.window, ())
        number = job.number
        for part in parts:
            jobs = part.jobs
            if 0 <= number < len(jobs) and jobs[number] is job:
                return part, number
        for part in parts:
            group = part.index.number(job.path)
            if group >= 0:
                return part, group
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
        """Whether the job has a clip pending (what urgency asks of every entry it passes):
        no sequence made."""
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
        loose = self._loose
        yield from list(loose)
        for parts in list(self._parts.values()):
            for part in parts:
                yield from (job for job, left in zip(part.jobs, part.left, strict=True)
                            if left and not (loose and job in loose))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    # -- changing (the board) ---------------------------------------------------------------

    def add_columns(self, window: int, pending: PendingColumns, jobs: Sequence[VideoJobKey],
                    ready: Callable[[ViewKey], bool] | None = None) -> None:
        """A planned window's (or part's) clips, `jobs` its videos' keys in order; the uses of
        batches `ready` already taken. A job pending already (a stand-in's clips, planned with
        another part) holds both parts' clips, loose."""
        if len(jobs) != len(pending):
            raise ValueError(f"{len(jobs)} jobs for {len(pending)} videos")
        part = _Part(pending, jobs)
        if ready is not None:
            part.take_batches(ready)
        for group in self._known(window, jobs):
            job = jobs[group]
            self.set(job, self.get(job, ()) + part.uses(group))
            part.take_group(group)
        self._parts.setdefault(window, []).append(part)

    def _known(self, window: int, jobs: Sequence[VideoJobKey]) -> list[int]:
        """Which of `jobs` (of `window`) are pending already, the loose ones by key, those of
        the window's parts by their paths' hashes, sorted, a window's (a window is planned
        in up to a few hundred parts: not each part's looked up for each), and then, for a
        hash found, by the path itself; the new ones' hashes join the window's."""
        known = set()
        if self._loose:
            known.update(i for i, job in enumerate(jobs) if job in self._loose)
        hashes = np.fromiter((hash(job.path) for job in jobs), np.int64, len(jobs))
        held = self._hashes.get(window, np.zeros(0, np.int64))
        if len(held):
            at = np.minimum(np.searchsorted(held, hashes), len(held) - 1)
            for index in np.flatnonzero(held[at] == hashes).tolist():  # the path, or a collision
                if any(part.index.number(jobs[index].path) >= 0
                       for part in self._parts[window]):
                    known.add(index)
        hashes.sort()  # merged in one pass: a sort of the window's each part was O(n log n)
        self._hashes[window] = np.insert(held, np.searchsorted(held, hashes), hashes)
        return sorted(known)

    def set(self, job: VideoJobKey, uses: Sequence[ClipUse]) -> None:
        """The job's pending clips from now on."""
        found = self._find(job)
        if found is not None:
            found[0].take_group(found[1])
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

    def drop_window(self, window: int) -> list[VideoJobKey]:
        """The window's jobs go; the loose ones that went."""
        self._parts.pop(window, None)
        self._hashes.pop(window, None)
        dropped = [job for job in self._loose if job.window == window]
        for job in dropped:
            del self._loose[job]
        return dropped
