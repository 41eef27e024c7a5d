"""What the pipeline's steps do on one stream path, as far as the config alone says: shared by
the task plan and the cross-task coordination."""

from __future__ import annotations

import numpy as np

from sandfs import ops as oplib
from sandfs.config.condition import ConditionError
from sandfs.config.schema import Condition, OpSpec, TaskConfig
from sandfs.ops.base import FrameShape
from sandfs.plan.abstract import PathStep, StreamPath


def step_ops(step_path: PathStep, choice: int | None) -> tuple[OpSpec, ...]:
    """The ops one DAG entry applies on a path, given the branch taken (None: no branch)."""
    step = step_path.step
    if step.branch_type == "multi" and step.branches:
        return step.branches[step_path.output_index].ops
    if step.branch_type in ("random", "conditional"):
        return () if choice is None else step.branches[choice].ops
    return step.ops


def has_temporal_op(path: StreamPath) -> bool:
    """Does some op on the path, on any branch, choose frames? Without one a clip's frames are
    those its loader decodes."""
    for ps in path.steps:
        step = ps.step
        specs = ([spec for branch in step.branches for spec in branch.ops]
                 if step.branch_type in ("random", "conditional") else step_ops(ps, None))
        if any(oplib.get_op(spec.name).temporal for spec in specs):
            return True
    return False


def source_shape(cfg: TaskConfig) -> FrameShape:
    """The frame the steps start from, as far as the config knows: the decode_resize size, or
    unknown (the video's)."""
    decode = cfg.dataset.sampling.decode_resize
    return FrameShape(*decode[0], "uint8") if decode else FrameShape(None, None, "uint8")


def static_output(path: StreamPath, num_frames: int,
                  shape: FrameShape) -> tuple[FrameShape, int]:
    """Frame shape and clip length at the end of a path (config validation made it fixed)."""
    for ps in path.steps:
        choice = 0 if ps.step.branch_type in ("random", "conditional") else None
        for spec in step_ops(ps, choice):
            op = oplib.get_op(spec.name)
            shape = op.output_shape(spec.param_dict(), shape)
            num_frames = op.output_frames(spec.param_dict(), num_frames)
    return shape, num_frames


def branch_label(ps: PathStep, choice: int | None) -> str:
    """How a clip's `branches` record names the branch it took at this step."""
    step = ps.step
    if step.branch_type in ("random", "conditional"):
        if choice is None:
            return "none"
        branch = step.branches[choice]
        if step.branch_type == "conditional":
            return "else" if branch.condition is None else branch.condition.source
        return str(choice)
    if step.branch_type == "multi":
        return step.outputs[ps.output_index]
    return step.branch_type


def branch_choice(ps: PathStep, draw: float | None, task: str, epoch: int,
                  iteration: int) -> int | None:
    """The branch a clip of `task` takes at this step (`draw`: its uniform draw at a random
    step; a conditional step's first branch whose condition holds in this view)."""
    step = ps.step
    if step.branch_type == "random":
        probs = np.array([b.prob for b in step.branches], dtype=np.float64)
        cumulative = np.cumsum(probs) / probs.sum()  # 0.333 x 3: each a third, exactly
        return int(min(np.searchsorted(cumulative, draw, side="right"), len(probs) - 1))
    if step.branch_type == "conditional":
        for i, branch in enumerate(step.branches):
            if branch.condition is None or _holds(task, step.name, branch.condition, epoch,
                                                  iteration):
                return i
    return None


def _holds(task: str, step: str, condition: Condition, epoch: int, iteration: int) -> bool:
    """A branch's condition; ConditionError names the task, step, expression and view."""
    try:
        return condition.holds(epoch=epoch, iteration=iteration, task=task)
    except ConditionError as exc:
        raise ConditionError(f"task {task} step {step}: condition '{condition.source}' at "
                             f"epoch {epoch} iteration {iteration}: {exc}") from None
