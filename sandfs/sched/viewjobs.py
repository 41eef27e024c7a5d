"""The jobs with clips for each batch of a window, as columns: a batch's jobs are a slice of one
index column (CSR), its row found by the batch key's hash in a sorted column, not a dict of
lists. A dict entry and a list a batch were ~25 bytes a clip of a planned window; these ~7."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sandfs.plan.window import ViewKey


class ViewJobs:
    """The jobs (`jobs[i]`) with clips for each of `views` (sorted by hash): batch b's are
    `jobs[job[starts[b]:starts[b + 1]]]`, each once, in the order of `jobs`."""

    __slots__ = ("_hashes", "job", "jobs", "starts", "views", "window")

    def __init__(self, window: int, views: Sequence[ViewKey], hashes: np.ndarray,
                 starts: np.ndarray, job: np.ndarray, jobs: Sequence) -> None:
        if not (len(starts) == len(hashes) + 1 == len(views) + 1 and starts[-1] == len(job)):
            raise ValueError(f"{len(starts)} starts for {len(views)} batches, {len(job)} jobs")
        self.window, self.views, self._hashes = window, views, hashes
        self.starts, self.job, self.jobs = starts, job, jobs

    def __len__(self) -> int:
        return len(self.views)

    def of(self, view: ViewKey) -> list:
        """The jobs with clips for `view` (none: not a batch of these)."""
        wanted = hash(view)
        row = int(np.searchsorted(self._hashes, wanted))
        while row < len(self._hashes) and self._hashes[row] == wanted:  # a collision: next
            if self.views[row] == view:
                found = self.job[self.starts[row]:self.starts[row + 1]].tolist()
                return [self.jobs[index] for index in found]
            row += 1
        return []


def view_jobs(window: int, views: Sequence[ViewKey], view: np.ndarray, job: np.ndarray,
              jobs: Sequence) -> ViewJobs:
    """`ViewJobs` from the (batch index into `views`, job index into `jobs`) of each clip."""
    hashes = np.fromiter(map(hash, views), np.int64, len(views))
    by_hash = np.argsort(hashes, kind="stable")
    row = np.empty(len(views), np.int64)
    row[by_hash] = np.arange(len(views))
    width = max(1, len(jobs))
    pairs = np.unique(row[view] * width + job)  # once each, by batch, then job
    starts = np.searchsorted(pairs // width, np.arange(len(views) + 1))
    return ViewJobs(window, [views[i] for i in by_hash.tolist()], hashes[by_hash], starts,
                    (pairs % width).astype(np.int32), jobs)
