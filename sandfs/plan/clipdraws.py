"""A task's clip draws per epoch as arrays (rows: listed videos, columns: samples): each clip's
start on the window's frame pool, the draw of each random branch step and the first output of
each random op's generator. They are computed for many videos at once (`draws.py`): the
batches a window plans, or one batch on demand; the task plan reads its clips' draws from them
and makes a clip's generator only where an op draws more than that output.

The same values as drawing clip by clip (`seeds.unit_draws`, `seeds.rng_for`): the keys are
those of `TaskPlan` (docs/contract.md#determinism).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sandfs import ops as oplib
from sandfs.plan.abstract import StreamPath
from sandfs.plan.draws import digest_words, key_texts, pcg64_first, unit_columns
from sandfs.plan.steps import step_ops

if TYPE_CHECKING:
    from sandfs.plan.task import TaskPlan

# batches planned alone keep the draws of the epochs drawn last, a window's and this many more
# (a window's planning releases its own); their arrays are zeroed pages, in memory where drawn
KEPT_EPOCHS_AFTER_WINDOW = 1

Prefix = tuple[tuple[str, int], ...]  # the DAG entries of a path up to a step


@dataclass(slots=True)
class EpochDraws:
    done: np.ndarray  # bool per listed video: its row is drawn
    # int32 (videos, samples): the clip's first frame on the pool (0 for a short video or an
    # evaluation view, whose clips are placed otherwise)
    starts: np.ndarray
    units: dict[Prefix, np.ndarray]  # float64 (videos, samples): a random branch step's draw
    outputs: dict[tuple[Prefix, int], np.ndarray]  # uint64 (videos, samples): by (prefix, op)
    crops_shared: bool  # the epoch's window shares crop windows with other tasks
    # int32 (videos, 3): each drawn video's frame count, height and width (its probe's)
    sizes: np.ndarray


def random_keys(paths: Sequence[StreamPath]) -> tuple[list[Prefix], list[tuple[Prefix, int]]]:
    """The prefixes of the random branch steps, and (prefix, position) of the ops that may draw
    (in any branch), on every path."""
    branches: dict[Prefix, None] = {}
    op_keys: dict[tuple[Prefix, int], None] = {}
    for path in paths:
        prefix: Prefix = ()
        for ps in path.steps:
            prefix += ((ps.step.name, ps.output_index),)
            choices: Sequence[int | None] = [None]
            if ps.step.branch_type in ("random", "conditional"):
                choices = range(len(ps.step.branches))
            if ps.step.branch_type == "random":
                branches[prefix] = None
            for choice in choices:
                for pos, spec in enumerate(step_ops(ps, choice)):
                    if oplib.get_op(spec.name).random:
                        op_keys[(prefix, pos)] = None
    return list(branches), list(op_keys)


class ClipDraws:
    """The draws of one task's clips, for the epochs drawn last."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan
        self.branch_prefixes, self.op_keys = random_keys(plan.paths)
        self._epochs: OrderedDict[int, EpochDraws] = OrderedDict()
        self._kept = plan.k_epochs + KEPT_EPOCHS_AFTER_WINDOW
        self._lock = threading.Lock()  # planning threads ask for the same epochs

    def prepare(self, epoch: int, indices: Sequence[int]) -> EpochDraws:
        """The epoch's draws, with those of these listed videos made (they must be usable:
        their probes are waited for, not under the lock). Two threads drawing the same videos
        write the same values; a video is marked drawn once its values are in."""
        with self._lock:
            found = self._epochs.get(epoch)
            if found is None:
                found = self._epochs[epoch] = self._empty(epoch)
                while len(self._epochs) > self._kept:
                    self._epochs.popitem(last=False)
        missing = np.unique(np.asarray(indices, dtype=np.int64))
        missing = missing[~found.done[missing]]
        if len(missing):
            self._draw(epoch, found, missing)
        return found

    def prepare_batches(self, epoch: int, iterations: Iterable[int]) -> None:
        """Draw the clips of these batches of the epoch at once (a window's, planned next)."""
        videos: list[int] = []
        for iteration in iterations:
            try:
                videos += self.plan.batch_videos(epoch, iteration)
            except Exception:  # its view fails, with the reason, when it is planned
                continue
        self.prepare(epoch, videos)

    def release(self, epoch: int) -> None:
        """Forget the epoch's draws (its views are planned): drawn again if asked for."""
        with self._lock:
            self._epochs.pop(epoch, None)

    def _empty(self, epoch: int) -> EpochDraws:
        plan = self.plan
        shape = (len(plan.listed), plan.sampling.samples_per_video)
        crops = plan.coordination.crop_windows(plan.cfg, plan.window_of(epoch))
        return EpochDraws(np.zeros(shape[0], bool), np.zeros(shape, np.int32),
                          {p: np.zeros(shape) for p in self.branch_prefixes},
                          {k: np.zeros(shape, np.uint64) for k in self.op_keys}, bool(crops),
                          np.zeros((shape[0], 3), np.int32))

    def _draw(self, epoch: int, into: EpochDraws, rows: np.ndarray) -> None:
        plan = self.plan
        samples = plan.sampling.samples_per_video
        infos = [plan.videos[int(i)] for i in rows]
        names = [info.name for info in infos]
        clips = [f"{name!r}, {sample!r}" for name in names for sample in range(samples)]
        head = (plan.data_key, epoch)
        for prefix, column in into.units.items():
            units = unit_columns(digest_words(key_texts(head, clips, ("branch", prefix))), 1)
            column[rows] = units.reshape(len(rows), samples)
        for (prefix, pos), column in into.outputs.items():
            words = digest_words(key_texts(head, clips, ("op", prefix, pos)))
            column[rows] = pcg64_first(words).reshape(len(rows), samples)
        into.sizes[rows] = [(info.num_frames, info.height, info.width) for info in infos]
        if not plan.test_views:
            frames = into.sizes[rows, 0].astype(np.int64)
            long = np.flatnonzero(frames >= plan.span_frames)
            if len(long):
                window = plan.window_of(epoch)
                pool = plan.coordination.pool(plan.cfg, window)
                into.starts[rows[long]] = pool.starts(
                    window, [names[i] for i in long], epoch + plan.epoch_offset, samples,
                    frames[long], plan.span_frames)
        into.done[rows] = True
