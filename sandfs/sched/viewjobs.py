"""The jobs with clips for each batch of a window, as columns: a batch's jobs are a slice of one
index column (CSR), its row found by the batch key's hash (`HashRows`), not a dict of lists. A
dict entry and a list a batch were ~25 bytes a clip of a planned window; these ~8. A job is its
video's number in the window's pending clips (`urgency_entries`), not a key object."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sandfs.plan.hashrows import HashRows
from sandfs.plan.window import ViewKey


class ViewJobs:
    """The jobs (numbers) with clips for each batch: batch b's (`views[b]`) are
    `job[starts[b]:starts[b + 1]]`, each once, ascending."""

    __slots__ = ("_batch", "_rows", "job", "starts", "window")

    def __init__(self, window: int, views: Sequence[ViewKey], starts: np.ndarray,
                 job: np.ndarray) -> None:
        if len(starts) != len(views) + 1 or starts[-1] != len(job):
            raise ValueError(f"{len(starts)} starts for {len(views)} batches, {len(job)} jobs")
        self._rows, self._batch = HashRows.of(views)  # a row's batch
        self.window, self.starts, self.job = window, starts, job

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def views(self) -> list[ViewKey]:
        return self._rows.keys

    def of(self, view: ViewKey) -> list[int]:
        """The jobs with clips for `view` (none: not a batch of these)."""
        row = self._rows.row(view)
        if row < 0:
            return []
        batch = self._batch[row]
        return self.job[self.starts[batch]:self.starts[batch + 1]].tolist()


def view_jobs(window: int, views: Sequence[ViewKey], keys: np.ndarray,
              jobs: int) -> ViewJobs:
    """`ViewJobs` from the sorted distinct keys `batch * jobs + job` of the clips (batch an
    index into `views`, job a number below `jobs`); `keys` is taken (its memory becomes the
    jobs')."""
    width = max(1, jobs)
    starts = np.searchsorted(keys, np.arange(len(views) + 1) * width)
    np.remainder(keys, width, out=keys)
    return ViewJobs(window, views, starts, keys.astype(np.int32))
