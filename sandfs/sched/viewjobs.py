"""The jobs with clips for each batch of a window, as columns: a batch's jobs are a slice of one
index column (CSR), its row found by the batch key's hash (`HashNumbers`), not a dict of lists,
and its key made when a hash is found (a window's batches as their rows' numbers, `TableRows`):
a dict entry and a list a batch were ~25 bytes a clip of a planned window, and a `ViewKey` held
a batch ~100 bytes more, a part's each (docs/performance.md#a-windows-batches-and-the-board);
these are 24 bytes a batch. A job is its video's number in the window's pending clips
(`urgency_entries`), not a key object."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from sandfs.plan.hashrows import HashNumbers, hashes_of
from sandfs.plan.uses import TableRows, UseColumns, ViewRow
from sandfs.plan.window import ViewKey


class ViewJobs:
    """The jobs (numbers) with clips for each batch: batch b's (`views[b]`) are
    `job[starts[b]:starts[b + 1]]`, each once, ascending."""

    __slots__ = ("_index", "_views", "job", "starts", "window")

    def __init__(self, window: int, views: Sequence[ViewKey] | TableRows, starts: np.ndarray,
                 job: np.ndarray) -> None:
        """`views`: the batches' keys, or their rows (a key made when read)."""
        if len(starts) != len(views) + 1 or starts[-1] != len(job):
            raise ValueError(f"{len(starts)} starts for {len(views)} batches, {len(job)} jobs")
        keys = views.views() if type(views) is TableRows else views
        self._index = HashNumbers().joined(hashes_of(keys, len(views)),
                                           np.arange(len(views), dtype=np.int32))
        self._views = views
        self.window, self.starts, self.job = window, starts, job

    def __len__(self) -> int:
        return len(self._views)

    @property
    def views(self) -> list[ViewKey]:
        """Each batch's key, made now."""
        views = self._views
        return list(views.views() if type(views) is TableRows else views)

    def _key(self, batch: int) -> ViewKey:
        views = self._views
        return views.key(batch) if type(views) is TableRows else views[batch]

    def of(self, view: ViewKey) -> list[int]:
        """The jobs with clips for `view` (none: not a batch of these)."""
        for batch in self._index.numbers(view):  # its hash's: the key checked
            if self._key(batch) == view:
                return self.job[self.starts[batch]:self.starts[batch + 1]].tolist()
        return []


def view_jobs(window: int, views: Sequence[ViewKey] | TableRows, keys: np.ndarray,
              jobs: int) -> ViewJobs:
    """`ViewJobs` from the sorted distinct keys `batch * jobs + job` of the clips (batch an
    index into `views`, job a number below `jobs`); `keys` is taken (its memory becomes the
    jobs')."""
    width = max(1, jobs)
    starts = np.searchsorted(keys, np.arange(len(views) + 1) * width)
    np.remainder(keys, width, out=keys)
    return ViewJobs(window, views, starts, keys.astype(np.int32))


class BatchNumbers:
    """A window's batches numbered as they come (`urgency_entries`): by their rows' numbers
    in its batch columns (`rows`), or by key (`keys`, uses not columns); `views`: the
    batches' keys, or their rows, by number."""

    def __init__(self, columns: UseColumns | None) -> None:
        self._columns = columns
        self._number = np.full(0 if columns is None else columns.held, -1, np.int64)
        self._rows = array("i")  # each batch's row, by number
        self._keys: dict[ViewKey, int] = {}

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, list[tuple]]:
        """Distinct rows' numbers and readers, those not met before numbered in order."""
        new = rows[self._number[rows] < 0]
        self._number[new] = np.arange(len(self._rows), len(self._rows) + len(new))
        self._rows.extend(new.tolist())
        table = self._columns.table  # type: ignore[union-attr]
        return self._number[rows], [table.readers_of(row) for row in rows.tolist()]

    def keys(self, rows: Sequence[ViewRow]) -> tuple[np.ndarray, list[tuple]]:
        """Distinct rows' numbers (by key) and readers."""
        keys = self._keys
        return (np.fromiter((keys.setdefault(row.view, len(keys)) for row in rows), np.int64,
                            len(rows)), [row.readers for row in rows])

    def views(self) -> Sequence[ViewKey] | TableRows:
        if self._columns is not None:
            return TableRows(self._columns.table, self._rows)
        return list(self._keys)
