"""A task's clip draws per epoch as arrays (rows: listed videos, columns: samples): each clip's
start on the window's frame pool, the draw of each random branch step and the first output of
each random op's generator. They are computed for many videos at once (`draws.py`): the
batches a window plans, or one batch on demand; the task plan reads its clips' draws from them
and makes a clip's generator only where an op draws more than that output.

The same values as drawing clip by clip (`seeds.clip_rng`, `draws.mixed_words` of one clip):
a video's key mixed with what is drawn, the epoch and the sample
(docs/contract.md#determinism).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from sandfs import ops as oplib
from sandfs.plan.abstract import StreamPath
from sandfs.plan.draws import digest_words, key_texts, mixed_words, pcg64_first, unit_columns
from sandfs.plan.seeds import purpose_word
from sandfs.plan.steps import step_ops

if TYPE_CHECKING:
    from sandfs.plan.pool import FramePool
    from sandfs.plan.task import TaskPlan

# batches planned alone keep the draws of the epochs drawn last, a window's and this many more
# (a window's planning releases its own); their arrays are zeroed pages, in memory where drawn
KEPT_EPOCHS_AFTER_WINDOW = 1
KEPT_WINDOWS = 2  # windows whose probes and pool anchors are kept: the one planned, the next
# clips drawn at once: their key texts and digests (~500 bytes a clip) are made, and freed,
# a few MB at a time, not for a whole window's epoch at once (50 MB at 100,000 videos)
CLIPS_DRAWN_AT_ONCE = 8192

_SIZE = attrgetter("num_frames", "height", "width")  # a probe's, as `WindowDraws` holds it
_NAME = attrgetter("name")

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
    # the videos of the batches drawn together (`prepare_batches`), found once as their probes
    # are waited for, until each is resolved (`take_batches`): int32 (iterations, videos a
    # batch), and how many each holds (0: none, or taken); arrays, not an int object a video
    batch_videos: np.ndarray
    batch_counts: np.ndarray

    def hold_batches(self, iterations: np.ndarray, videos: np.ndarray) -> None:
        """Hold these batches' videos (rows; -1: the places a short last batch lacks)."""
        self.batch_videos[iterations] = videos  # before its count: a reader sees it whole
        self.batch_counts[iterations] = (videos >= 0).sum(axis=1)

    def take_batches(self, iterations: Sequence[int]) -> list[list[int] | None]:
        """Each batch's videos, as `prepare_batches` found them (None: it did not), once (an
        iteration asked twice: the first time), read at once."""
        asked = np.asarray(iterations, np.int64).reshape(-1)
        taken = np.zeros(len(asked), bool)
        taken[np.unique(asked, return_index=True)[1]] = True
        taken &= (asked >= 0) & (asked < len(self.batch_counts))
        if not taken.any():  # an epoch of no batches has no row to read
            return [None] * len(asked)
        counts = np.zeros(len(asked), np.int64)
        counts[taken] = self.batch_counts[asked[taken]]
        self.batch_counts[asked[taken]] = 0
        rows = self.batch_videos[np.where(taken, asked, 0)].tolist()
        return [row[:count] if count else None
                for row, count in zip(rows, counts.tolist(), strict=True)]


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


def epoch_batches(plan: TaskPlan, epoch: int, iterations: Iterable[int]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`TaskPlan.batch_videos` of these batches of the epoch, those it finds (a batch it does
    not fails, with the reason, when it is planned): their iterations, and their videos as
    rows (-1: the places a short last batch lacks). Their slots are read from the epoch's
    order at once, the stand-ins not found so far found at once (`StandIns.of_many`), their
    probes asked for first."""
    iterations = np.fromiter(iterations, np.int64)
    per_batch, order = plan.sampling.videos_per_batch, plan.epoch_order(epoch)
    places = iterations[:, None] * per_batch + np.arange(per_batch)
    held = places < len(order)  # an epoch's last batch may hold fewer
    slots = np.full(places.shape, -1, np.int64)
    slots[held] = order[places[held]]
    videos = np.where(held, plan.stand_ins.found[slots], -1)
    wanted = held & (videos < 0)
    if wanted.any():
        plan.videos.want(slots[wanted].tolist())
        videos[wanted] = plan.stand_ins.of_many(slots[wanted])
    failed = (held & (videos < 0)).any(axis=1)
    return iterations[~failed], videos[~failed].astype(np.int32)


@dataclass(slots=True, weakref_slot=True)
class WindowDraws:
    """What every epoch of a window draws alike, by listed video, for every task placing the
    listing (`ListingFacts.window_draws`: one object while a task holds it). ~117 bytes a
    video (docs/design.md#planning)."""

    looked: np.ndarray  # bool: the videos whose probes were looked up (set after the two)
    names: np.ndarray  # object: their repr(name)s (None: not looked up)
    sizes: np.ndarray  # int32 (videos, 3): their frame counts, heights and widths
    pools: dict[int, tuple[np.ndarray, np.ndarray]]  # by pool key: (drawn, `FramePool.words`)

    @classmethod
    def empty(cls, count: int) -> WindowDraws:
        return cls(np.zeros(count, bool), np.full(count, None, object),
                   np.zeros((count, 3), np.int32), {})


class ClipDraws:
    """The draws of one task's clips, for the epochs drawn last."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan
        self.branch_prefixes, self.op_keys = random_keys(plan.paths)
        self._purposes = {p: purpose_word("branch", p) for p in self.branch_prefixes} | {
            key: purpose_word("op", *key) for key in self.op_keys}
        # each listed video's key (`video_keys`), made when first drawn: 17 bytes a video
        self._keyed = np.zeros(len(plan.listed), bool)
        self._keys = np.zeros((len(plan.listed), 2), np.uint64)
        self._epochs: OrderedDict[int, EpochDraws] = OrderedDict()
        self._kept = plan.k_epochs + KEPT_EPOCHS_AFTER_WINDOW
        self._lock = threading.Lock()  # planning threads ask for the same epochs
        # what the epochs of a window draw alike, found once a window, not once an epoch: the
        # windows used last (a batch on demand in another window evicts the oldest)
        self._windows: OrderedDict[int, WindowDraws] = OrderedDict()

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
        indices = np.asarray(indices, dtype=np.int64)
        missing = indices[~found.done[indices]]
        if len(missing):  # each once, in order: a count a listed video, not a sort
            missing = np.flatnonzero(np.bincount(missing, minlength=len(found.done)))
        rows = max(1, CLIPS_DRAWN_AT_ONCE // self.plan.sampling.samples_per_video)
        for start in range(0, len(missing), rows):
            self._draw(epoch, found, missing[start : start + rows])
        return found

    def prepare_batches(self, epoch: int, iterations: Iterable[int]) -> None:
        """Draw the clips of these batches of the epoch at once (a window's, planned next)."""
        found, videos = epoch_batches(self.plan, epoch, iterations)
        self.prepare(epoch, videos[videos >= 0]).hold_batches(found, videos)

    def _window(self, window: int) -> WindowDraws:
        with self._lock:
            found = self._windows.get(window)
            if found is None:
                plan = self.plan
                found = self._windows[window] = plan.listing.window_draws(
                    window, lambda: WindowDraws.empty(len(plan.listed)))
                while len(self._windows) > KEPT_WINDOWS:
                    self._windows.popitem(last=False)
            self._windows.move_to_end(window)
        return found

    def _probed(self, window: int, rows: np.ndarray) -> np.ndarray:
        """(frames, height, width) of these listed videos, their probes looked up once a
        window (with their names: `_names`)."""
        found = self._window(window)
        missing = rows[~found.looked[rows]]
        if len(missing):
            infos = self.plan.videos.infos(missing.tolist())
            found.sizes[missing] = np.fromiter(chain.from_iterable(map(_SIZE, infos)), np.int32,
                                               3 * len(infos)).reshape(-1, 3)
            found.names[missing] = list(map(repr, map(_NAME, infos)))
            found.looked[missing] = True  # after the two: a reader sees them whole
        return found.sizes[rows]

    def _names(self, window: int, rows: np.ndarray) -> list[str]:
        """repr(name) of these listed videos, their probes looked up once a window."""
        self._probed(window, rows)
        return self._window(window).names[rows].tolist()

    def pool_words(self, epoch: int, rows: np.ndarray) -> np.ndarray:
        """`FramePool.words` of these listed videos in the epoch's window."""
        window = self.plan.window_of(epoch)
        return self._pool_words(window, self.plan.coordination.pool(self.plan.cfg, window), rows)

    def _pool_words(self, window: int, pool: FramePool, rows: np.ndarray) -> np.ndarray:
        """`FramePool.words` of these listed videos in the window: made for those not drawn
        yet, from their names (their probes looked up once a window)."""
        pools = self._window(window).pools
        found = pools.get(pool.key)
        if found is None:
            count = len(self.plan.listed)
            found = pools.setdefault(pool.key, (np.zeros(count, bool),
                                                np.zeros((count, 4), np.uint64)))
        drawn, words = found
        missing = np.flatnonzero(~drawn[rows])
        if len(missing):
            words[rows[missing]] = pool.words(window, self._names(window, rows[missing]))
            drawn[rows[missing]] = True  # after its words: a reader sees them whole
        return words[rows]

    def video_keys(self, window: int, rows: np.ndarray) -> np.ndarray:
        """The key each of these listed videos' draws are mixed from (`draws.mixed_words`):
        two words of a SHA-256 of the task's data key and the video's name (looked up in
        `window`), made once a video, not once a clip and a draw."""
        missing = rows[~self._keyed[rows]]
        if len(missing):
            self._keys[missing] = digest_words(key_texts(
                (self.plan.data_key, "video"), self._names(window, missing)))[:, :2]
            self._keyed[missing] = True
        return self._keys[rows]

    def drawn(self, epoch: int) -> EpochDraws | None:
        """The epoch's draws, if held."""
        return self._epochs.get(epoch)

    def release(self, epoch: int) -> None:
        """Forget the epoch's draws (its views are planned): drawn again if asked for; and
        what its window's epochs draw alike, once none of them is held."""
        window = self.plan.window_of(epoch)
        with self._lock:
            self._epochs.pop(epoch, None)
            if not any(self.plan.window_of(e) == window for e in self._epochs):
                self._windows.pop(window, None)

    def _empty(self, epoch: int) -> EpochDraws:
        plan = self.plan
        shape = (len(plan.listed), plan.sampling.samples_per_video)
        crops = plan.coordination.crop_windows(plan.cfg, plan.window_of(epoch))
        return EpochDraws(np.zeros(shape[0], bool), np.zeros(shape, np.int32),
                          {p: np.zeros(shape) for p in self.branch_prefixes},
                          {k: np.zeros(shape, np.uint64) for k in self.op_keys}, bool(crops),
                          np.zeros((shape[0], 3), np.int32),
                          np.zeros((plan.iterations_per_epoch, plan.sampling.videos_per_batch),
                                   np.int32), np.zeros(plan.iterations_per_epoch, np.int32))

    def _draw(self, epoch: int, into: EpochDraws, rows: np.ndarray) -> None:
        plan = self.plan
        samples = plan.sampling.samples_per_video
        window = plan.window_of(epoch)
        into.sizes[rows] = self._probed(window, rows)
        keys = np.repeat(self.video_keys(window, rows), samples, axis=0)
        clips = (len(rows), samples)
        sample = np.tile(np.arange(samples), len(rows))
        for prefix, column in into.units.items():
            words = mixed_words(keys, self._purposes[prefix], epoch, sample, 1)
            column[rows] = unit_columns(words, 1).reshape(clips)
        for key, column in into.outputs.items():
            words = mixed_words(keys, self._purposes[key], epoch, sample)
            column[rows] = pcg64_first(words).reshape(clips)
        if not plan.test_views:
            frames = into.sizes[rows, 0].astype(np.int64)
            long = np.flatnonzero(frames >= plan.span_frames)
            if len(long):
                pool = plan.coordination.pool(plan.cfg, window)
                words = self._pool_words(window, pool, rows[long])
                into.starts[rows[long]] = pool.starts(epoch + plan.epoch_offset, samples,
                                                      frames[long], plan.span_frames, words)
        into.done[rows] = True
