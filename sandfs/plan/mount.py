"""Planning all the tasks of a mount together (SAND §5.2): tasks that read the same dataset share
one frame pool (temporal randomness on the GCD of their strides) and shared crop windows
(spatial randomness: one random window as big as the largest crop, each task's crop a random
sub-region of it), so their clips reuse the same decoded and cropped frames while each task keeps
its own data-access rules and its own draws.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from sandfs import ops as oplib
from sandfs.config.schema import TaskConfig
from sandfs.media.types import DatasetScan
from sandfs.ops.base import FrameShape
from sandfs.plan.abstract import stream_paths
from sandfs.plan.pool import POOL_SPANS, FramePool
from sandfs.plan.seeds import derive_seed, fingerprint
from sandfs.plan.task import TaskPlan, step_ops

CropContext = tuple  # (dataset root, static (H, W) of the crop's input or None = the video's)


def span_frames(cfg: TaskConfig) -> int:
    sampling = cfg.dataset.sampling
    return (sampling.frames_per_video - 1) * sampling.frame_stride + 1


def shared_pools(configs: Sequence[TaskConfig]) -> dict[str, FramePool]:
    """One pool per dataset root: grid = GCD of the strides, width = POOL_SPANS longest spans."""
    by_root: dict[str, list[TaskConfig]] = defaultdict(list)
    for cfg in configs:
        by_root[cfg.dataset.video_dataset_path].append(cfg)
    return {
        root: FramePool(
            key=derive_seed("pool", root),
            grid=math.gcd(*(c.dataset.sampling.frame_stride for c in group)),
            width_frames=POOL_SPANS * max(span_frames(c) for c in group),
        )
        for root, group in by_root.items()
    }


def random_crop_contexts(cfg: TaskConfig) -> list[tuple[CropContext, tuple[int, int]]]:
    """Every random_crop of the task with the static shape of its input and its size."""
    found = []
    for path in stream_paths(cfg):
        shape = FrameShape(None, None, "uint8")
        for ps in path.steps:
            choice = 0 if ps.step.branch_type in ("random", "conditional") else None
            for spec in step_ops(ps, choice):
                if spec.name == "random_crop":
                    in_hw = (shape.height, shape.width) if shape.height else None
                    found.append(((cfg.dataset.video_dataset_path, in_hw),
                                  tuple(spec.param_dict()["size"])))
                shape = oplib.get_op(spec.name).output_shape(spec.param_dict(), shape)
    return found


def shared_crop_windows(configs: Sequence[TaskConfig]) -> dict[CropContext, tuple[int, int]]:
    """Crop contexts that tasks with different data share: context -> the window's (H, W)."""
    sizes: dict[CropContext, dict[object, tuple[int, int]]] = defaultdict(dict)
    for cfg in configs:
        data = fingerprint((cfg.dataset, cfg.seed))
        for context, size in random_crop_contexts(cfg):
            old = sizes[context].get(data, (0, 0))
            sizes[context][data] = (max(old[0], size[0]), max(old[1], size[1]))
    return {
        context: (max(h for h, _ in by_data.values()), max(w for _, w in by_data.values()))
        for context, by_data in sizes.items()
        if len(by_data) > 1
    }


def independent_pool(cfg: TaskConfig) -> FramePool:
    """No coordination (the baseline planning is measured against): every clip start uniform
    over the whole video, drawn by its task alone."""
    return FramePool(derive_seed("pool", cfg.task), cfg.dataset.sampling.frame_stride, 1 << 30)


def plan_tasks(configs: Sequence[TaskConfig], scans: Mapping[tuple, DatasetScan], *,
               k_epochs: int, coordinate: bool = True) -> list[TaskPlan]:
    """The plans of all the tasks of a mount. `coordinate=False` plans each task on its own
    with fresh randomness per clip (for measuring what coordination saves and costs)."""
    pools = shared_pools(configs)
    windows = shared_crop_windows(configs) if coordinate else {}
    plans = []
    for cfg in configs:
        found = scans[(cfg.dataset.video_dataset_path, cfg.dataset.extensions)]
        pool = pools[cfg.dataset.video_dataset_path] if coordinate else independent_pool(cfg)
        plans.append(TaskPlan(cfg, found.videos, k_epochs=k_epochs,
                              all_rel_paths=[b.rel_path for b in found.bad],
                              pool=pool, crop_windows=windows))
    return plans
