"""What the pipeline's steps do on one stream path, as far as the config alone says: shared by
the task plan and the cross-task coordination."""

from __future__ import annotations

from sandfs.config.schema import OpSpec, TaskConfig
from sandfs.ops.base import FrameShape
from sandfs.plan.abstract import PathStep


def step_ops(step_path: PathStep, choice: int | None) -> tuple[OpSpec, ...]:
    """The ops one DAG entry applies on a path, given the branch taken (None: no branch)."""
    step = step_path.step
    if step.branch_type == "multi" and step.branches:
        return step.branches[step_path.output_index].ops
    if step.branch_type in ("random", "conditional"):
        return () if choice is None else step.branches[choice].ops
    return step.ops


def source_shape(cfg: TaskConfig) -> FrameShape:
    """The frame the steps start from, as far as the config knows: the decode_resize size, or
    unknown (the video's)."""
    decode = cfg.dataset.sampling.decode_resize
    return FrameShape(*decode[0], "uint8") if decode else FrameShape(None, None, "uint8")
