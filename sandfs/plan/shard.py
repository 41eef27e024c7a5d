"""Rank shards for data-parallel training, with torch's DistributedSampler semantics.

Each epoch has ONE permutation of the videos, the same for every rank (it depends on the seed
and the dataset identity, never on the rank or the task name). With drop_last false it is padded
by wrapping around to a multiple of the world size W; with drop_last true it is truncated to
one. Rank R takes positions R, R+W, R+2W, ... so every rank gets the same number of videos and
iterations, and every video appears exactly once per epoch across the ranks (plus at most W-1
padding repeats, or minus at most W-1 truncated ones). A clip and its augmentations depend on
the video, the epoch and the sample only, so a W-rank run's views are a 1-rank run's clips
reorganised, whichever rank holds a video.

Each rank is its own task (e.g. `slowfast.r3`) with `dataset.sampling.shard` in its config.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from sandfs.config.schema import Shard, TaskConfig


def shard_positions(num_videos: int, shard: Shard | None, drop_last: bool) -> np.ndarray:
    """The positions of an epoch's permutation that this rank reads, in order."""
    if shard is None:
        return np.arange(num_videos)
    world = shard.world_size
    per_rank = num_videos // world if drop_last else math.ceil(num_videos / world)
    positions = np.arange(shard.rank, per_rank * world, world)
    return positions % num_videos if num_videos else positions  # padding wraps around


def shard_from_env(environ: Mapping[str, str] = os.environ) -> Shard | None:
    """The shard torchrun (or any launcher setting WORLD_SIZE and RANK) gives this process;
    None when WORLD_SIZE is not set. Raises ValueError naming the variable for a bad value."""
    if "WORLD_SIZE" not in environ:
        return None
    world_size = _env_int(environ, "WORLD_SIZE", minimum=1)
    rank = _env_int(environ, "RANK", minimum=0)
    if rank >= world_size:
        raise ValueError(f"RANK={rank} must be less than WORLD_SIZE={world_size}")
    return Shard(world_size, rank)


def rank_task_name(task: str, shard: Shard) -> str:
    """The conventional name of a rank's task: `slowfast` rank 3 -> `slowfast.r3`."""
    return f"{task}.r{shard.rank}"


def shard_configs(cfg: TaskConfig, world_size: int) -> list[TaskConfig]:
    """The `world_size` rank tasks of one task config, named by `rank_task_name`."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    configs = []
    for rank in range(world_size):
        shard = Shard(world_size, rank)
        sampling = replace(cfg.dataset.sampling, shard=shard)
        configs.append(replace(cfg, task=rank_task_name(cfg.task, shard),
                               dataset=replace(cfg.dataset, sampling=sampling)))
    return configs


def _env_int(environ: Mapping[str, str], name: str, *, minimum: int) -> int:
    text = environ.get(name)
    if text is None:
        raise ValueError(f"{name} is not set (WORLD_SIZE is: {environ['WORLD_SIZE']!r})")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value}: must be at least {minimum}")
    return value
