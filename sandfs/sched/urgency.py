"""Which pending video jobs are worth ranking: the dispatcher ranks the jobs each task needs
soonest, not every pending job. Each task's pending clips in its read order, built once when
jobs are added and walked from a cursor that passes the jobs already done.

Ranking every pending job at every dispatch cost the trio loop O(jobs): with 1,000 videos (two
windows, 2,000 jobs of a few milliseconds each) it spent 28 of the run's 55 CPU-s choosing jobs,
and a batch of 8 small clips took 0.38 s (docs/performance.md#planning-and-scheduling-at-scale). A
job's deadline is the soonest position a reader of its clips stands at, so in each task's order
the first pending jobs are the most urgent; all jobs at the position of the last one taken are
taken too (the videos of one batch rank by their decoding, `policy.priority`).

A task's order is two columns, its entries' positions and jobs' numbers (`pending.job_number`,
a key made when asked for), not a tuple an entry; a window's jobs of each batch are `ViewJobs`
columns (docs/design.md#planning). An entry whose clip is gone is passed when met (`_fresh`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from sandfs.plan.uses import ViewRow, batches, distinct_rows
from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.jobs import TaskOrder, UrgencyEntries, VideoJobKey
from sandfs.sched.pending import PendingClips, PendingColumns, job_number, number_window
from sandfs.sched.viewjobs import BatchNumbers, ViewJobs, view_jobs

URGENT_JOBS_PER_TASK = 32  # ranked per dispatch, and those tied with the last of them
# jobs whose soonest positions are kept: a dispatch checks those it ranks, a few per task
_SOONEST_KEPT = 4096
_NONE = (np.zeros(0, np.int64), np.zeros(0, np.int64))


class KeyNumbers:
    """Job numbers for the keys of a plain mapping of pending clips (no `PendingClips`),
    given as keys are met."""

    def __init__(self) -> None:
        self._numbers: dict[VideoJobKey, int] = {}
        self._keys: dict[int, VideoJobKey] = {}

    def number(self, job: VideoJobKey) -> int:
        number = self._numbers.get(job)
        if number is None:
            number = self._numbers[job] = job_number(job.window, len(self._numbers))
            self._keys[number] = job
        return number

    def key_of(self, number: int) -> VideoJobKey:
        return self._keys[number]


def _merged(first: TaskOrder, then: TaskOrder) -> TaskOrder:
    """Two orders as one by position, `first`'s entries before `then`'s at a tie."""
    positions = np.concatenate((first[0], then[0]))
    by = np.argsort(positions, kind="stable")
    return positions[by], np.concatenate((first[1], then[1]))[by]


def _walk(order: TaskOrder, start: int) -> Iterator[tuple[int, int, int]]:
    """(index, position, job) from `start`, read a chunk at a time (a numpy scalar a read
    costs more than the rank it serves)."""
    positions, jobs = order
    size = 64
    while start < len(positions):
        end = start + size
        yield from zip(range(start, end), positions[start:end].tolist(),
                       jobs[start:end].tolist(), strict=False)
        start, size = end, size * 2


def _column(entries: list[tuple[int, int]]) -> TaskOrder:
    return (np.array([p for p, _ in entries], np.int64),
            np.array([j for _, j in entries], np.int64))


class UrgencyOrder:
    def __init__(self, per_task: int = URGENT_JOBS_PER_TASK,
                 numbers: PendingClips | None = None) -> None:
        """`numbers`: the board's pending clips, which number its jobs (None: numbered here,
        for a plain mapping of pending clips)."""
        self.per_task = per_task
        self.numbers: PendingClips | KeyNumbers = numbers if numbers is not None else (
            KeyNumbers())
        self._order: dict[str, TaskOrder] | None = None  # None: rebuild
        self._cursor: dict[str, int] = {}
        self._staged: dict[str, list[tuple[int, int]]] = {}  # `add`s not placed yet
        # the jobs of each window's batches: numbers from its first job's (an int), or by
        # its videos' numbers (an array)
        self._windows: list[tuple[ViewJobs, int | np.ndarray]] = []
        # lists, not sets: a set of a batch's 8 jobs is 728 bytes (91 a clip), a list 120
        self._more_views: dict[ViewKey, list[int]] = {}  # clips added one by one
        # each ranked job's soonest position a task, while its pending clips are the same
        # (`PendingClips.token`): an entry sooner than it is stale (`_fresh`)
        self._soonest: dict[VideoJobKey, tuple[object, dict[str, int]]] = {}

    def _has(self, pending: Mapping) -> Callable[[int], bool]:
        """Whether a job (number) has clips pending: with no key or sequence made where
        `pending` numbers the jobs (the board's)."""
        if pending is self.numbers:
            return pending.has_number
        key_of = self.numbers.key_of
        return lambda job: job >= 0 and bool(pending.get(key_of(job)))

    def _alive(self, order: TaskOrder, start: int, pending: Mapping) -> TaskOrder:
        """The entries from `start` whose jobs are still pending."""
        positions, jobs = order[0][start:], order[1][start:]
        if pending is self.numbers:  # a window in parts merges each: not a call an entry
            keep = pending.have_numbers(jobs)
        else:
            keep = np.fromiter(map(self._has(pending), jobs.tolist()), bool, len(jobs))
        return positions[keep], jobs[keep]

    def rebuild(self) -> None:
        """Pending clips left (a window dropped): the order is built again when next asked."""
        self._order = None

    def add(self, job: VideoJobKey, use: ClipUse) -> None:
        """One clip became pending again: placed in each reader's order (after the entries at
        its position), the cursor moved back to it if it is sooner. Placed when the order is
        next read, all such clips at once: an insertion into a column copies it."""
        if self._order is None:
            return
        number = self.numbers.number(job)
        _add_job(self._more_views, use.view, number)
        for task, position in use.readers:
            self._staged.setdefault(task, []).append((position, number))

    def add_many(self, added: Iterable[tuple[VideoJobKey, ClipUse]],
                 pending: Mapping[VideoJobKey, Sequence[ClipUse]]) -> None:
        """Many clips became pending (a window, a task's part): merged into each reader's
        order with the entries not passed yet and still pending."""
        if self._order is None:
            return
        self._place_staged()
        new: dict[str, list[tuple[int, int]]] = defaultdict(list)
        numbered: dict[VideoJobKey, int] = {}  # a job's clips come together: numbered once
        for job, use in added:
            number = numbered.get(job)
            if number is None:
                number = numbered[job] = self.numbers.number(job)
            _add_job(self._more_views, use.view, number)
            for task, position in use.readers:
                new[task].append((position, number))
        for task, entries in new.items():
            old = self._alive(self._order.get(task, _NONE), self._cursor.get(task, 0), pending)
            self._order[task], self._cursor[task] = _merged(_column(entries), old), 0

    def add_entries(self, added: UrgencyEntries,
                    pending: Mapping[VideoJobKey, Sequence[ClipUse]],
                    first: int | None = None) -> None:
        """A window's jobs (`urgency_entries`, made in its planning thread), merged as
        `add_many` merges clips; `pending`: as it was before them. `first`: the number of its
        first job, the others on from it (`PendingClips.add_columns`; None: each video's
        job numbered here). Its positions are taken, not copied: made for the board alone."""
        order = self._built(pending)
        if first is None:
            numbers = np.fromiter((self.numbers.number(job) for job in added.jobs), np.int64,
                                  len(added.videos))
        if len(added.views):
            self._windows.append((added.views, first if first is not None else numbers))
        for task, (positions, jobs) in added.by_task.items():
            jobs = jobs + first if first is not None else numbers[jobs]
            old = self._alive(order.get(task, _NONE), self._cursor.get(task, 0), pending)
            entries = positions, jobs
            order[task], self._cursor[task] = _merged(entries, old) if len(old[0]) else entries, 0

    def forget_window(self, window: int, views: Iterable[ViewKey]) -> None:
        """A window dropped: its jobs leave the order (entries before a cursor are passed)."""
        if self._order is None:
            return
        self._place_staged()
        for task, (positions, jobs) in self._order.items():
            start = self._cursor[task]
            keep = (number_window(jobs[start:]) != window) & (jobs[start:] >= 0)
            self._order[task] = positions[start:][keep], jobs[start:][keep]
            self._cursor[task] = 0
        self._windows = [(jobs, at) for jobs, at in self._windows if jobs.window != window]
        for job in [job for job in self._soonest if job.window == window]:
            del self._soonest[job]
        for view in views:
            self._more_views.pop(view, None)

    def urgent(self, pending: Mapping[VideoJobKey, Sequence[ClipUse]],
               busy: set) -> set[VideoJobKey]:
        """The pending jobs (not `busy`) each task needs soonest. An entry made at a clip
        since taken or forgotten is stale: passed, its job's entry placed at its soonest
        clip now, and the task ranked again, as an order built from scratch would rank; tasks in
        name order, whatever order their entries came in."""
        order = self._built(pending)
        chosen: set[VideoJobKey] = set()
        for task in sorted(order):  # a task's picks leave the next one others: a fixed order
            while (picked := self._rank(task, pending, busy, chosen)) is None:
                self._place_staged()
            chosen |= picked
        return chosen

    def _rank(self, task: str, pending: Mapping, busy: set, chosen: set[VideoJobKey]
              ) -> set[VideoJobKey] | None:
        """The task's soonest jobs not `chosen` or `busy` (None: a stale entry was met)."""
        entries = self._order[task]  # type: ignore[index]
        has, key_of = self._has(pending), self.numbers.key_of
        stale = False
        start = len(entries[0])
        for index, position, job in _walk(entries, self._cursor[task]):
            if has(job):
                if self._fresh(entries, index, task, position, key_of(job), pending):
                    start = index
                    break  # before it: done or stale, never pending again unless clips are added
                stale = True
        self._cursor[task] = start
        picked: set[VideoJobKey] = set()
        taken, last = 0, None
        for index, position, job in _walk(entries, start):
            if taken >= self.per_task and position != last:
                break
            if not has(job):
                continue
            key = key_of(job)
            if key in chosen or key in picked or key in busy:
                continue
            if not self._fresh(entries, index, task, position, key, pending):
                stale = True
                continue
            picked.add(key)
            taken, last = taken + 1, position
        return None if stale else picked

    def _fresh(self, entries: TaskOrder, index: int, task: str, position: int,
               job: VideoJobKey, pending: Mapping) -> bool:
        """Whether the entry is at or after its job's soonest clip for the task now; if not
        (the clip it was made at was taken, or its batch failed), it is passed from now on
        (its job number -1) and one placed at the soonest clip the job has left."""
        soonest = self._soonest_of(job, pending).get(task)
        if soonest is not None and soonest <= position:
            return True
        entries[1][index] = -1
        if soonest is not None:
            self._staged.setdefault(task, []).append((soonest, self.numbers.number(job)))
        return False

    def _soonest_of(self, job: VideoJobKey, pending: Mapping) -> dict[str, int]:
        """The soonest position each task reads one of the job's pending clips at, kept while
        they are the same (a memo, as `BatchBoard._work_of`'s)."""
        token_of = getattr(pending, "token", None)
        uses = None if token_of is not None else pending.get(job, ())
        token = token_of(job) if token_of is not None else uses
        kept = self._soonest.get(job)
        if kept is not None and (kept[0] is token or (type(token) is tuple and kept[0] == token)):
            return kept[1]
        soonest: dict[str, int] = {}
        for use in uses if uses is not None else pending.get(job, ()):
            for task, at in use.readers:
                soonest[task] = min(soonest.get(task, at), at)
        if len(self._soonest) >= _SOONEST_KEPT:  # mostly jobs run since: not one a video
            self._soonest.clear()
        self._soonest[job] = (token, soonest)
        return soonest

    def of_views(self, views: Iterable[ViewKey], pending: Mapping[VideoJobKey,
                 Sequence[ClipUse]]) -> set[VideoJobKey]:
        """The pending jobs with clips for these batches (a blocked reader's)."""
        self._built(pending)
        has, key_of = self._has(pending), self.numbers.key_of
        return {key_of(job) for view in views for job in self._jobs_of(view) if has(job)}

    def jobs_of(self, view: ViewKey) -> list[VideoJobKey]:
        """The jobs that had clips for `view`, pending or not, each once."""
        return [self.numbers.key_of(job) for job in self._jobs_of(view)]

    def _jobs_of(self, view: ViewKey) -> list[int]:
        """`jobs_of`, by number."""
        found = [job for jobs, at in self._windows for job in _numbered(jobs.of(view), at)]
        more = self._more_views.get(view, ())
        return found + [job for job in more if job not in found] if more else found

    def entries(self, task: str) -> list[tuple[int, VideoJobKey]]:
        """The task's order, passed entries too but stale ones: (position, job)."""
        if self._order is None:
            return []
        self._place_staged()
        positions, jobs = self._order.get(task, _NONE)
        key_of = self.numbers.key_of
        return [(p, key_of(j)) for p, j in zip(positions.tolist(), jobs.tolist(), strict=True)
                if j >= 0]

    def _place_staged(self) -> None:
        """The clips `add`ed since the order was last read, each after the entries at its
        position and those added before it there: as one insertion at a time would. They are
        sorted by position first (stable: added order at a tie), since `np.insert` puts the
        values of one index in the order given, and the cursor goes back to the first."""
        assert self._order is not None
        for task, staged in self._staged.items():
            positions, jobs = self._order.get(task, _NONE)
            staged.sort(key=lambda entry: entry[0])
            new, numbers = _column(staged)
            at = np.searchsorted(positions, new, side="right")
            self._order[task] = np.insert(positions, at, new), np.insert(jobs, at, numbers)
            self._cursor[task] = min(self._cursor.get(task, len(positions)), int(at[0]))
        self._staged.clear()

    def _built(self, pending: Mapping[VideoJobKey, Sequence[ClipUse]]) -> dict[str, TaskOrder]:
        if self._order is None:
            order: dict[str, list[tuple[int, int]]] = defaultdict(list)
            jobs_of_view: dict[ViewKey, list[int]] = {}
            for job, uses in pending.items():
                number = self.numbers.number(job)
                for use in uses:
                    _add_grouped_job(jobs_of_view, use.view, number)
                    for task, position in use.readers:
                        order[task].append((position, number))
            self._order = {}
            for task, entries in order.items():
                entries.sort(key=lambda entry: entry[0])
                self._order[task] = _column(entries)
            self._more_views, self._windows, self._staged = jobs_of_view, [], {}
            self._soonest = {}
            self._cursor = dict.fromkeys(order, 0)
        elif self._staged:
            self._place_staged()
        return self._order


def _numbered(jobs: list[int], at: int | np.ndarray) -> list[int]:
    """A window's jobs (its videos' numbers) as the board's numbers."""
    return [at + job for job in jobs] if isinstance(at, int) else at[jobs].tolist()


def urgency_entries(window: int, pending: Mapping[str, Sequence[ClipUse]]) -> UrgencyEntries:
    """The window's jobs (its videos' clips `pending`, by path) in each task's read order: one
    entry a job and task, at the soonest position a reader of the task reads one of its clips
    (`urgent` takes a job at its first entry), ties in the order of `pending`. In a planning
    thread, in numpy from the uses' columns: a Python step a batch, not a clip; a chunk of
    videos at a time (`_CHUNK_VIDEOS`). Batches are numbered as they come: by their rows'
    numbers where `pending` is columns (no row or key held a batch), else by key."""
    count = len(pending)
    columns = pending.columns if isinstance(pending, PendingColumns) else None
    uses = [] if columns is not None else list(pending.values())
    batches = BatchNumbers(columns)
    tasks: dict[str, int] = {}
    found: dict[int, list[TaskOrder]] = {}  # by task, in the order tasks first come
    pairs = []  # (batch, job) of each chunk's clips, once each: batch * count + job
    for first in range(0, count, _CHUNK_VIDEOS):
        if columns is not None:  # read from the columns by index: no sequence a video
            rows, row_of, use_job = _chunk_columns(pending, first, _CHUNK_VIDEOS)  # type: ignore[arg-type]
            row_view, readers = batches.rows(rows)
        else:
            rows, row_of, use_job = _chunk_uses(uses[first:first + _CHUNK_VIDEOS], first)
            row_view, readers = batches.keys(rows)
        by_task, keys = _chunk_entries(row_view, readers, row_of, use_job, tasks, count)
        for task, entries in by_task.items():
            found.setdefault(task, []).append(entries)
        pairs.append(keys)
    names = list(tasks)
    by_task = {}
    for task in list(found):
        parts = found.pop(task)  # let go as joined: not held beside the whole
        positions = np.concatenate([p for p, _ in parts])
        jobs = np.concatenate([j for _, j in parts]).astype(np.int64, copy=False)
        del parts
        by = np.argsort(positions, kind="stable")  # ties: in job order, as the chunks come
        by_task[names[task]] = positions[by], jobs[by]
    keys = np.concatenate(pairs) if pairs else np.zeros(0, np.int64)
    pairs.clear()
    keys.sort()  # by batch, then job; each once (a job is in one chunk)
    return UrgencyEntries(window, by_task, view_jobs(window, batches.views(), keys, count),
                          pending)


# videos a chunk: the arrays of a whole window (~60 MB at 100,000 videos, freed) stayed in
# the heap, as much RSS again as the entries hold; a chunk's are reused by the next
_CHUNK_VIDEOS = 4096


def _chunk_uses(uses: Sequence[Sequence[ClipUse]], first_job: int
                ) -> tuple[list[ViewRow], np.ndarray, np.ndarray]:
    """Jobs `first_job`... (their `uses`): the distinct batches of their clips, each clip's
    batch among them and its job."""
    per_video = [batches(video) for video in uses]
    counts = np.fromiter(map(len, per_video), np.int64, len(uses))
    rows, row_of = distinct_rows(per_video)  # a ViewRow a batch
    use_job = np.repeat(np.arange(first_job, first_job + len(uses)), counts)
    return rows, np.frombuffer(row_of, np.int32), use_job


def _chunk_columns(pending: PendingColumns, first_job: int, count: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_chunk_uses` of up to `count` videos from `first_job`, read from the window's columns
    by index (those taken left out): the batches as their rows' numbers."""
    columns, taken = pending.columns, pending.taken
    starts = np.frombuffer(columns.starts, columns.starts.typecode)
    end = min(first_job + count, len(starts) - 1)
    low, high = int(starts[first_job]), int(starts[end])
    use_row = np.frombuffer(columns.batch, np.int32)[low:high]
    use_job = np.repeat(np.arange(first_job, end), np.diff(starts[first_job:end + 1]))
    if taken is not None:
        left = np.frombuffer(taken, np.uint8)[low:high] == 0
        use_row, use_job = use_row[left], use_job[left]
    found, row_of = np.unique(use_row, return_inverse=True)
    return found.astype(np.int64), row_of, use_job


def _chunk_entries(row_view: np.ndarray, row_readers: list[tuple], use_row: np.ndarray,
                   use_job: np.ndarray, tasks: dict[str, int], width: int
                   ) -> tuple[dict[int, TaskOrder], np.ndarray]:
    """A chunk's clips (each one's batch, an index into its distinct batches, and job), those
    batches' numbers (`row_view`) and readers: each task's (soonest position, job) in job
    order, and the (batch, job) keys of the clips (`urgency_entries`); tasks numbered in
    `tasks` as they come."""
    readers = np.array([(tasks.setdefault(task, len(tasks)), position)
                        for found in row_readers for task, position in found],
                       np.int64).reshape(-1, 2)
    reader_counts = np.fromiter(map(len, row_readers), np.int64, len(row_readers))
    return (_soonest(readers, reader_counts, use_row, use_job),
            np.unique(row_view[use_row] * width + use_job))


def _soonest(readers: np.ndarray, reader_counts: np.ndarray, use_row: np.ndarray,
             use_job: np.ndarray) -> dict[int, TaskOrder]:
    """Each task's jobs (ascending) and the soonest position its readers read one of their
    clips; tasks in the order their first entries come. `readers`: (task, position) of each
    row's readers, a row's together (`reader_counts` a row)."""
    row_start = np.concatenate(([0], np.cumsum(reader_counts)))
    per_use = reader_counts[use_row]
    within = np.arange(per_use.sum()) - np.repeat(np.cumsum(per_use) - per_use, per_use)
    reader = np.repeat(row_start[use_row], per_use) + within  # a use's readers, in order
    task, position, job = readers[reader, 0], readers[reader, 1], np.repeat(use_job, per_use)
    found, first = np.unique(task, return_index=True)
    by_task = {}
    for index in found[np.argsort(first)].tolist():
        mine = task == index
        mine_job, mine_position = job[mine], position[mine]  # jobs ascending
        starts = np.flatnonzero(np.r_[True, mine_job[1:] != mine_job[:-1]])
        by_task[index] = np.minimum.reduceat(mine_position, starts), mine_job[starts]
    return by_task


def _add_grouped_job(jobs_of_view: dict[ViewKey, list], view: ViewKey, job: Hashable) -> None:
    """`_add_job` where a job's clips come together: the job can only be the list's last."""
    jobs = jobs_of_view.get(view)
    if jobs is None:
        jobs_of_view[view] = [job]
    elif jobs[-1] != job:
        jobs.append(job)


def _add_job(jobs_of_view: dict[ViewKey, list], view: ViewKey, job: Hashable) -> None:
    """`job` has clips for `view`: once in its list (a batch's few jobs: a scan is cheap)."""
    jobs = jobs_of_view.get(view)
    if jobs is None:
        jobs_of_view[view] = [job]
    elif job not in jobs:
        jobs.append(job)
