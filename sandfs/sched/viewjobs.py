"""The jobs with clips for each batch of a window, as columns: a batch's jobs are a slice of one
index column (CSR), its row found by the batch key's hash (`HashRows`), not a dict of lists. A
dict entry and a list a batch were ~25 bytes a clip of a planned window; these ~7."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sandfs.plan.window import ViewKey
from sandfs.sched.hashrows import HashRows


class ViewJobs:
    """The jobs (`jobs[i]`) with clips for each batch (`rows`): row b's are
    `jobs[job[starts[b]:starts[b + 1]]]`, each once, in the order of `jobs`."""

    __slots__ = ("job", "jobs", "rows", "starts", "window")

    def __init__(self, window: int, rows: HashRows, starts: np.ndarray, job: np.ndarray,
                 jobs: Sequence) -> None:
        if len(starts) != len(rows) + 1 or starts[-1] != len(job):
            raise ValueError(f"{len(starts)} starts for {len(rows)} batches, {len(job)} jobs")
        self.window, self.rows, self.starts, self.job, self.jobs = window, rows, starts, job, jobs

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def views(self) -> list[ViewKey]:
        return self.rows.keys

    def of(self, view: ViewKey) -> list:
        """The jobs with clips for `view` (none: not a batch of these)."""
        row = self.rows.row(view)
        if row < 0:
            return []
        return [self.jobs[index] for index in self.job[self.starts[row]:self.starts[row + 1]]
                .tolist()]


def view_jobs(window: int, views: Sequence[ViewKey], view: np.ndarray, job: np.ndarray,
              jobs: Sequence) -> ViewJobs:
    """`ViewJobs` from the (batch index into `views`, job index into `jobs`) of each clip."""
    rows, order = HashRows.of(views)
    row = np.empty(len(views), np.int64)
    row[order] = np.arange(len(views))
    width = max(1, len(jobs))
    pairs = np.unique(row[view] * width + job)  # once each, by batch, then job
    starts = np.searchsorted(pairs // width, np.arange(len(views) + 1))
    return ViewJobs(window, rows, starts, (pairs % width).astype(np.int32), jobs)
