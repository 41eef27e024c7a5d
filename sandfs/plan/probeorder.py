"""The order a lazy scan probes a task's videos in: the order its first window's parts wait for
them (docs/contract.md#lazy-scan). A part is planned with every batch its videos are in, in
each epoch of the window, so the part holding epoch-0 batch b waits for b's videos and for the
videos of the batches they share in the window's other epochs: up to 8 + 4 x 8 x 7 = 232
videos a batch of 8 at k = 5. Probing in epoch-0 order alone left those batch-mates for the
planner to ask for, a batch at a time, each a round trip through the scan's thread.

Pure and lazy: the order of 250,000 videos is made a few batches at a time, as the scan takes
it (numpy: ~10 ms of CPU per 1,000 videos), not before the mount serves."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sandfs.plan.task import TaskPlan

BATCHES_PER_STEP = 16  # epoch-0 batches expanded at a time


def reading_order(plan: TaskPlan) -> Iterator[str]:
    """The task's listed videos (rel_path, each once) in the order its first window's parts
    wait for them: per epoch-0 batch, its videos, then those of the batches each of them is
    in in the window's other epochs; the videos no epoch-0 batch reads are left out."""
    epochs = [e for e in plan.window_epochs(plan.window_of(0)) if e != 0]
    per = plan.sampling.videos_per_batch
    first = np.asarray(plan.epoch_order(0), dtype=np.int64)
    others = [_Epoch(np.asarray(plan.epoch_order(e), dtype=np.int64), len(plan.listed))
              for e in epochs]
    seen = np.zeros(len(plan.listed), dtype=bool)
    step = BATCHES_PER_STEP * per
    for start in range(0, len(first), step):
        own = _rows(first[start:start + step], per)  # a row per batch
        rows = np.concatenate([own, *(o.mates(own, per) for o in others)], axis=1)
        for index in _first_unseen(rows.ravel(), seen):
            yield plan.listed[index].rel_path


class _Epoch:
    """One epoch's order and where each listed video stands in it (-1: not read)."""

    def __init__(self, order: np.ndarray, listed: int) -> None:
        self.order = order
        self.position = np.full(listed, -1, dtype=np.int64)
        self.position[order] = np.arange(len(order))

    def mates(self, own: np.ndarray, per: int) -> np.ndarray:
        """Per row of `own` (videos, -1 padding), the videos of each one's batch here, -1
        where there is none."""
        position = np.where(own >= 0, self.position[np.maximum(own, 0)], -1)
        slots = (position // per * per)[..., None] + np.arange(per)  # (rows, per, per)
        valid = (position >= 0)[..., None] & (slots < len(self.order))
        mates = np.where(valid, self.order[np.minimum(slots, len(self.order) - 1)], -1)
        return mates.reshape(len(own), -1)


def _rows(videos: np.ndarray, per: int) -> np.ndarray:
    padded = np.full(-(-len(videos) // per) * per, -1, dtype=np.int64)
    padded[:len(videos)] = videos
    return padded.reshape(-1, per)


def _first_unseen(candidates: np.ndarray, seen: np.ndarray) -> list[int]:
    """The candidates not seen yet (-1 skipped), each once, in their first order; now seen."""
    _, first = np.unique(candidates, return_index=True)
    ordered = candidates[np.sort(first)]
    fresh = ordered[ordered >= 0]
    fresh = fresh[~seen[fresh]]
    seen[fresh] = True
    return fresh.tolist()
