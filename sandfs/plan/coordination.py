"""Coordinated randomness across the tasks of a mount (SAND §5.2), frozen per k-epoch window.

Tasks that read the same dataset share one frame pool per window (temporal randomness on the
GCD of their strides) and shared crop windows (spatial randomness: one random window as big as
the largest crop, each task's crop a random sub-region of it), so their clips reuse the same
decoded and cropped frames while each task keeps its own draws.

What a window uses is computed from the tasks registered when the window is first planned and
then frozen: a task that joins or leaves later changes other tasks' views only in windows not
planned yet. Windows count *mount* epochs: a task that joins a live mount gets an epoch offset
(the epoch the leading task on its dataset stands at), so its epochs fall into the windows the
others are in, and its clips nest in theirs from its first epoch on. The frozen state and the
offsets are checkpointed (`state()` / `load()`), so a restart plans every window it had planned
exactly as before.

Datasets are told apart by their identity (identity.py: tag, relative paths and sizes), never by
their location: each task plan binds its task to the identity of its scan (`bind`), and tasks
whose data have the same identity share pools and crop windows wherever each one reads it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from sandfs import ops as oplib
from sandfs.config.schema import TaskConfig
from sandfs.media.types import VideoInfo
from sandfs.plan.abstract import stream_paths
from sandfs.plan.identity import DatasetIdentity, data_fingerprint, dataset_identity
from sandfs.plan.listing import Listings
from sandfs.plan.pool import POOL_SPANS, FramePool
from sandfs.plan.seeds import derive_seed
from sandfs.plan.steps import source_shape, step_ops

# of the checkpoint; 3: windows keyed by dataset identity, not by root; 4: each entry carries
# the fingerprints of the task configs that shaped it
STATE_VERSION = 4
DataKey = tuple[str, str]  # DatasetIdentity.key
CropContext = tuple  # (dataset identity key, static (H, W) of the crop's input, or None)

log = logging.getLogger(__name__)


def config_fingerprint(cfg: TaskConfig) -> str:
    """What of a task's config shapes the windows it shares: its draws (dataset section
    without the path, and seed). A checkpointed window applies only while this is unchanged."""
    return f"{derive_seed('shapes', data_fingerprint(cfg.dataset), cfg.seed):032x}"


def span_frames(cfg: TaskConfig) -> int:
    sampling = cfg.dataset.sampling
    return (sampling.frames_per_video - 1) * sampling.frame_stride + 1


def step_choices(ps) -> int | None:
    return 0 if ps.step.branch_type in ("random", "conditional") else None


def random_crop_contexts(cfg: TaskConfig,
                         data: DataKey) -> list[tuple[CropContext, tuple[int, int]]]:
    """Every random_crop of the task with the static shape of its input and its size."""
    found = []
    for path in stream_paths(cfg):
        shape = source_shape(cfg)
        for ps in path.steps:
            for spec in step_ops(ps, step_choices(ps)):
                if spec.name == "random_crop":
                    in_hw = (shape.height, shape.width) if shape.height else None
                    found.append(((data, in_hw),
                                  tuple(spec.param_dict()["size"])))
                shape = oplib.get_op(spec.name).output_shape(spec.param_dict(), shape)
    return found


def shared_crop_windows(configs: Sequence[TaskConfig],
                        data: DataKey) -> dict[CropContext, tuple[int, int]]:
    """Crop contexts that tasks with different draws share: context -> the window's (H, W).
    (Ranks of one task and trials with identical pipelines and seeds draw alike.)"""
    sizes: dict[CropContext, dict[object, tuple[int, int]]] = defaultdict(dict)
    for cfg in configs:
        draws = repr((data_fingerprint(cfg.dataset), cfg.seed))
        for context, size in random_crop_contexts(cfg, data):
            old = sizes[context].get(draws, (0, 0))
            sizes[context][draws] = (max(old[0], size[0]), max(old[1], size[1]))
    return {
        context: (max(h for h, _ in by_data.values()), max(w for _, w in by_data.values()))
        for context, by_data in sizes.items()
        if len(by_data) > 1
    }


def shared_pool(data: DataKey, configs: Sequence[TaskConfig]) -> FramePool:
    """Grid = GCD of the strides, width = POOL_SPANS longest spans; its randomness comes from
    the dataset's identity and the seeds of the tasks sharing it (another seed, another pool)."""
    longest = max(span_frames(c) for c in configs)
    return FramePool(
        key=derive_seed("pool", data, sorted({c.seed for c in configs})),
        grid=math.gcd(*(c.dataset.sampling.frame_stride for c in configs)),
        width_frames=POOL_SPANS * longest,
        span_frames=longest,
    )


def independent_pool(cfg: TaskConfig, data: DataKey) -> FramePool:
    """No coordination (the baseline planning is measured against): every clip start uniform
    over the whole video (grid 1, a pool as wide as any video), drawn by its task alone."""
    return FramePool(derive_seed("independent", data, data_fingerprint(cfg.dataset), cfg.seed),
                     1, 1 << 30, span_frames(cfg))


class Coordination:
    def __init__(self, configs: Sequence[TaskConfig], *, coordinate: bool = True) -> None:
        self.coordinate = coordinate
        self._configs = {c.task: c for c in configs}
        self._data: dict[str, DataKey] = {}  # task -> the identity of its dataset (`bind`)
        self._identities: dict[tuple[int, str], tuple[Sequence, DatasetIdentity]] = {}
        self._pools: dict[tuple[DataKey, int], FramePool] = {}
        self._crops: dict[tuple[DataKey, int], dict[CropContext, tuple[int, int]]] = {}
        self._offsets: dict[str, int] = {}  # task -> epoch offset (tasks that joined late)
        # the config fingerprints of the tasks that shaped each frozen window, and of the tasks
        # whose offset was checkpointed: what a checkpoint entry applies to
        self._shapers: dict[tuple[DataKey, int], dict[str, str]] = {}
        self._offset_configs: dict[str, str] = {}
        # what `join` took from the checkpoint (offset, its config), given back by `withdraw`
        self._joined: dict[str, tuple[int | None, str | None]] = {}
        self._lock = threading.Lock()
        self.listings = Listings()  # what tasks placing the same videos derive alike
        self.changed = False  # frozen state not checkpointed yet

    def remove(self, name: str) -> None:
        """The task no longer shapes windows frozen from now on. Which data it read stays
        known: its views in the windows frozen already are planned again when they are
        released (a plan keeps 4,096 views; ending a task over 10,000 videos failed, EIO at
        the unlink, once they were planned without it)."""
        with self._lock:
            self._configs.pop(name, None)
            self._offsets.pop(name, None)
            self._joined.pop(name, None)
            self.changed = True

    def withdraw(self, name: str) -> None:
        """A task refused before it was served: as `remove`, but what `join` took from the
        checkpoint is put back, so the task registered again starts at its checkpointed epoch
        offset (the bytes it read before the restart), not the leading task's."""
        with self._lock:
            self._configs.pop(name, None)
            if name not in self._joined:  # withdrawn already, or never joined
                return
            offset, config = self._joined.pop(name)
            self._offsets.pop(name, None)
            if offset is not None:
                self._offsets[name] = offset
            if config is not None:
                self._offset_configs[name] = config
            self.changed = True

    def forget_unreached(self, k_epochs: int) -> int:
        """Forget the frozen windows no task sharing their dataset can read any more (a task
        ended: its views are released by now); how many. A window one of them may still read,
        behind it or not, stays frozen: its views must read the same bytes again. `k_epochs`:
        the mount's window size."""
        with self._lock:
            reach: dict[DataKey, list[range]] = defaultdict(list)
            for name, cfg in self._configs.items():
                if name in self._data:
                    first = self._offsets.get(name, 0)
                    reach[self._data[name]].append(
                        range(first // k_epochs, (first + cfg.epochs - 1) // k_epochs + 1))
            gone = [key for key in self._pools
                    if not any(key[1] in windows for windows in reach.get(key[0], ()))]
            for key in gone:
                del self._pools[key], self._crops[key]
                self._shapers.pop(key, None)
            self.changed = self.changed or bool(gone)
            return len(gone)

    def task_configs(self) -> list[TaskConfig]:
        """The configs of the tasks that shape windows now."""
        with self._lock:
            return list(self._configs.values())

    def join(self, cfg: TaskConfig, mount_epoch: int) -> None:
        """Register a task that joins a live mount where the leading task on its dataset stands
        at `mount_epoch` (its epoch offset); a checkpointed offset of the same task wins, so a
        restart plans it as before."""
        with self._lock:
            self._configs[cfg.task] = cfg
            self._joined[cfg.task] = (self._offsets.get(cfg.task),
                                      self._offset_configs.get(cfg.task))
            checkpointed = self._offset_configs.pop(cfg.task, None)
            if checkpointed is not None and not _offset_applies(cfg, checkpointed):
                self._offsets.pop(cfg.task, None)
            if cfg.task not in self._offsets and mount_epoch and self.coordinate:
                self._offsets[cfg.task] = mount_epoch
                self.changed = True

    def identity(self, tag: str, videos: Sequence[VideoInfo]) -> DatasetIdentity:
        """The identity of a scan's videos, computed once for all the tasks given the same
        sequence (a mount passes each scan's tuple to every task reading it)."""
        with self._lock:
            seen = self._identities.get((id(videos), tag))
            if seen is None or seen[0] is not videos:  # kept alive: its id is not reused
                seen = (videos, dataset_identity(tag, videos))
                self._identities[(id(videos), tag)] = seen
            return seen[1]

    def bind(self, name: str, identity: DatasetIdentity) -> None:
        """Tell which data task `name` reads (its plan does, before planning any window)."""
        with self._lock:
            self._data[name] = identity.key

    def epoch_offset(self, name: str) -> int:
        """Mount epoch = task epoch + offset (0 for the tasks the mount started with)."""
        with self._lock:
            return self._offsets.get(name, 0)

    def pool(self, cfg: TaskConfig, window: int) -> FramePool:
        data = self._data_of(cfg.task)
        if not self.coordinate:
            return independent_pool(cfg, data)
        pool, _ = self._frozen(cfg, data, window)
        stride = cfg.dataset.sampling.frame_stride
        if stride % pool.grid:  # joined after the window froze: a finer grid for this task
            pool = replace(pool, grid=math.gcd(pool.grid, stride))
        return pool

    def is_frozen(self, name: str, window: int) -> bool:
        """Are the window's pool and crops on task `name`'s dataset frozen already (planning
        the task's views there freezes nothing)?"""
        with self._lock:
            data = self._data.get(name)
            return not self.coordinate or (data, window) in self._pools

    def crop_windows(self, cfg: TaskConfig, window: int) -> dict[CropContext, tuple[int, int]]:
        if not self.coordinate:
            return {}
        data = self._data_of(cfg.task)
        return self._frozen(cfg, data, window)[1]

    def _data_of(self, name: str) -> DataKey:
        with self._lock:
            if name not in self._data:
                raise KeyError(f"task {name!r} has no dataset identity bound (plan it first)")
            return self._data[name]

    def _frozen(self, cfg: TaskConfig, data: DataKey, window: int
                ) -> tuple[FramePool, dict[CropContext, tuple[int, int]]]:
        """The window's pool and crop windows on the dataset, frozen the first time they are
        asked for. A task removed while a window was planned for it in a thread gets its own,
        frozen for no one: that plan is dropped, and no other task's window depends on it."""
        key = (data, window)
        with self._lock:
            if key not in self._pools:
                sharing = [c for name, c in self._configs.items()
                           if self._data.get(name) == data]
                if not sharing:
                    return shared_pool(data, [cfg]), shared_crop_windows([cfg], data)
                # evaluation tasks (test_views) draw nothing: they must not widen others' pools
                sharing = [c for c in sharing if not c.dataset.sampling.test_views] or sharing
                self._shapers[key] = {c.task: config_fingerprint(c) for c in sharing}
                self._pools[key] = shared_pool(data, sharing)
                self._crops[key] = shared_crop_windows(sharing, data)
                self.changed = True
            return self._pools[key], self._crops[key]

    # -- checkpoint --------------------------------------------------------------------------

    def state(self) -> dict:
        with self._lock:
            self.changed = False
            offsets = {name: {"epoch": epoch, "config": self._offset_config(name)}
                       for name, epoch in sorted(self._offsets.items())}
            return {"version": STATE_VERSION, "epoch_offsets": offsets, "windows": [
                {"dataset": list(data), "window": window, "pool_key": str(pool.key),
                 "grid": pool.grid, "width_frames": pool.width_frames,
                 "span_frames": pool.span_frames,
                 "configs": dict(sorted(self._shapers.get((data, window), {}).items())),
                 "crops": [[list(ctx[1]) if ctx[1] else None, list(size)]
                           for ctx, size in sorted(self._crops[(data, window)].items(),
                                                   key=repr)]}
                for (data, window), pool in sorted(self._pools.items())
            ]}

    def _offset_config(self, name: str) -> str | None:
        cfg = self._configs.get(name)
        return config_fingerprint(cfg) if cfg else self._offset_configs.get(name)

    def load(self, state: dict) -> None:
        """Take the frozen windows of an earlier run (a checkpoint written by `state`): those
        that no task configured differently now shaped. The others are discarded, loudly: a
        task that was edited is planned as with a fresh cache dir."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown plan state version {state.get('version')!r}")
        with self._lock:
            for name, entry in state["epoch_offsets"].items():
                self._take_offset(str(name), int(entry["epoch"]), entry["config"])
            for entry in state["windows"]:
                data = (str(entry["dataset"][0]), str(entry["dataset"][1]))
                key = (data, int(entry["window"]))
                shapers = {str(k): str(v) for k, v in entry["configs"].items()}
                edited = sorted(name for name, fp in shapers.items()
                                if name in self._configs
                                and config_fingerprint(self._configs[name]) != fp)
                if edited:
                    log.warning("plan checkpoint: window %d of dataset %s was planned for "
                                "another config of task %s: planned again", key[1], data[0],
                                ", ".join(edited))
                    continue
                self._shapers[key] = shapers
                self._pools[key] = FramePool(int(entry["pool_key"]), int(entry["grid"]),
                                             int(entry["width_frames"]),
                                             int(entry["span_frames"]))
                self._crops[key] = {
                    (data, tuple(hw) if hw else None): (int(size[0]), int(size[1]))
                    for hw, size in entry["crops"]
                }

    def _take_offset(self, name: str, epoch: int, config: str | None) -> None:
        """A checkpointed epoch offset; a task configured now is checked here, one that joins
        later when it joins (`join`)."""
        cfg = self._configs.get(name)
        if cfg is not None and not _offset_applies(cfg, config):
            return
        self._offsets[name] = epoch
        if cfg is None and config is not None:
            self._offset_configs[name] = config


def _offset_applies(cfg: TaskConfig, config: str | None) -> bool:
    if config == config_fingerprint(cfg):
        return True
    log.warning("plan checkpoint: task %s was edited since its epoch offset was checkpointed: "
                "the offset is discarded", cfg.task)
    return False
