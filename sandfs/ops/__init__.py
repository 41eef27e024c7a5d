"""Augmentation ops: the registry of steps a task config may name, and the helpers the planner
and the materializer use. The built-in steps and their parameters are listed in `builtin.py`.

How an op runs
--------------
1. `validate_op(name, raw)` checks the config's parameters once and returns them normalized
   (defaults filled in, lists as tuples, sorted (key, value) pairs): the `Params` of `OpSpec`.
2. `draw_instance(name, params, rng, in_hw)` resolves the op's randomness for one clip whose
   frames are `in_hw` = (H, W): an `OpInstance(name, params, drawn)`, hashable, which names the
   cached objects it produces. Only the planner draws, so every frame of a clip gets the same
   crop, flip, jitter.
3. `apply_instance(inst, clip)` is a pure function of the instance and the frames: same instance,
   same input bytes -> same output bytes, in any process.

Writing a custom step
---------------------
Subclass `sandfs.ops.base.OpType`, set `name` (the key used in a config) and override:

- `validate(raw) -> dict`: check `raw` (a mapping from the YAML), fill in defaults, raise
  `OpParamError(key, message)` naming the key and what is allowed. Unknown keys are errors.
- `apply(params, drawn, frame) -> ndarray`: one HWC frame with 3 channels (uint8, or float32
  after `to_float`/`normalize`) to a C-contiguous HWC frame; never modify `frame` in place. An op
  that leaves a frame unchanged may return it as is, so treat every frame as read-only.
  Temporal steps set `temporal = True` and override `frame_order` instead (see `InvSample`).
- `output_shape(params, shape)` if the frame size or dtype changes (None dims: unknown until a
  video is seen), `output_frames(params, num_frames)` if the clip length changes.
- `draw(params, rng, in_hw) -> Params` if the step is random (set `random = True`): draw from
  `rng` only (numpy Generator), and return plain hashable values (int, float, bool, str,
  tuples).
- `track(params, drawn, window, in_hw)` if the step moves pixels (a crop, a flip), so the crop
  box reported in metadata stays in source pixels.

Out of process: set `isolation = "process"` (and `timeout_s`, default 30 s per call) on the
class to run it in a small pool of worker processes (`isolated.py`), so its dependencies never
load into the daemon and a crash, `os._exit` or hang fails only the views that use it (EIO, the
reason in status.json's `isolated_ops.failures`). The class must be importable by module and
name (not defined in `__main__` or inside a function); frames reach it through shared memory.

Register it with `register_op` (a class decorator) in code that runs before the config is
loaded, or publish it from an installed package as an entry point, loaded on the first lookup
of a name that is not built in:

    # pyproject.toml of your package
    [project.entry-points."sandfs.ops"]
    cutout = "my_package.ops:Cutout"
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sandfs.ops import isolated
from sandfs.ops.base import FrameShape, OpInstance, OpParamError, OpType, Params, Window
from sandfs.ops.builtin import BUILTIN_OPS

__all__ = [
    "ENTRY_POINT_GROUP",
    "FrameShape",
    "OpInstance",
    "OpParamError",
    "OpType",
    "Params",
    "Window",
    "apply_chain",
    "apply_instance",
    "chain_shape",
    "crop_box",
    "draw_chain",
    "draw_instance",
    "get_op",
    "op_names",
    "register_op",
    "track_chain",
    "track_frames",
    "validate_op",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "sandfs.ops"

_OPS: dict[str, OpType] = {}
_entry_points_lock = threading.Lock()
_entry_points_loaded = False


def register_op(op_type: type[OpType]) -> type[OpType]:
    """Add an op type to the registry (usable as a class decorator); names are unique."""
    if not (isinstance(op_type, type) and issubclass(op_type, OpType)):
        raise TypeError(f"register_op takes an OpType subclass, got {op_type!r}")
    name = getattr(op_type, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{op_type.__qualname__} needs a class attribute `name` (a string)")
    isolated.check_isolation(op_type)
    if name in _OPS:
        raise ValueError(f"op {name!r} is already registered by {type(_OPS[name]).__qualname__}")
    _OPS[name] = op_type()
    return op_type


def entry_points(group: str) -> Iterable:
    """The installed packages' entry points of `group`. importlib.metadata is imported here:
    a config of built-in steps is checked without it (0.02-0.03 s of a mount's start)."""
    from importlib import metadata

    return metadata.entry_points(group=group)


def _load_entry_points() -> None:
    """Register the ops that installed packages publish, once; a broken one is logged and
    skipped so that it cannot take the built-in steps down with it."""
    global _entry_points_loaded
    with _entry_points_lock:
        if _entry_points_loaded:
            return
        for entry_point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                register_op(entry_point.load())
            except Exception as exc:
                log.warning(
                    "op plugin %s = %s not loaded: %s", entry_point.name, entry_point.value, exc
                )
        _entry_points_loaded = True


def op_names() -> list[str]:
    _load_entry_points()
    return sorted(_OPS)


def get_op(name: str) -> OpType:
    """The op registered as `name`; the plug-ins are loaded on the first name not found."""
    op = _OPS.get(name)
    if op is None and not _entry_points_loaded:
        _load_entry_points()
        op = _OPS.get(name)
    if op is None:
        raise KeyError(f"unknown op {name!r}; allowed: {', '.join(op_names())}")
    return op


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _to_params(values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Params:
    items = values.items() if isinstance(values, Mapping) else values
    return tuple(sorted((key, _freeze(value)) for key, value in items))


def validate_op(name: str, raw_params: Mapping[str, Any] | None) -> Params:
    """The op's normalized parameters; raises KeyError (unknown op) or OpParamError."""
    op = get_op(name)
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, Mapping):
        raise OpParamError("", f"{name} takes a mapping of parameters, got {raw_params!r}")
    return _to_params(op.validate(raw_params))


def draw_instance(
    name: str, params: Params, rng: np.random.Generator, in_hw: tuple[int, int]
) -> OpInstance:
    drawn = get_op(name).draw(dict(params), rng, in_hw)
    return OpInstance(name, params, _to_params(drawn))


def _out_hw(op: OpType, params: Mapping[str, Any], drawn: Mapping[str, Any],
            in_hw: tuple[int, int]) -> tuple[int, int]:
    shape = op.drawn_shape(params, drawn, FrameShape(in_hw[0], in_hw[1]))
    return (shape.height, shape.width)


def draw_chain(
    ops: Sequence[tuple[str, Params]], rng: np.random.Generator, in_hw: tuple[int, int]
) -> list[OpInstance]:
    """Draw a sequence of ops for one clip, each with the frame size its input will have."""
    instances = []
    for name, params in ops:
        instances.append(draw_instance(name, params, rng, in_hw))
        in_hw = _out_hw(get_op(name), dict(params), dict(instances[-1].drawn), in_hw)
    return instances


def apply_instance(inst: OpInstance, clip: list[np.ndarray]) -> list[np.ndarray]:
    op = get_op(inst.name)
    if op.isolation == "process":
        return isolated.apply_isolated(op, dict(inst.params), dict(inst.drawn), clip)
    return op.apply_clip(dict(inst.params), dict(inst.drawn), clip)


def apply_chain(instances: Iterable[OpInstance], clip: list[np.ndarray]) -> list[np.ndarray]:
    for inst in instances:
        clip = apply_instance(inst, clip)
    return clip


def chain_shape(
    ops: Sequence[tuple[str, Params]], shape: FrameShape, num_frames: int
) -> tuple[FrameShape, int]:
    """Static frame shape and clip length after `ops`; raises OpParamError where an op cannot
    take its input (e.g. color_jitter after normalize)."""
    for name, params in ops:
        op, param_map = get_op(name), dict(params)
        shape = op.output_shape(param_map, shape)
        num_frames = op.output_frames(param_map, num_frames)
    return shape, num_frames


def track_chain(instances: Iterable[OpInstance], window: Window, in_hw: tuple[int, int]) -> Window:
    """Map `window` (start: Window(0, 0, W, H) of the source frame) through the instances."""
    for inst in instances:
        op, params, drawn = get_op(inst.name), dict(inst.params), dict(inst.drawn)
        window = op.track(params, drawn, window, in_hw)
        in_hw = _out_hw(op, params, drawn, in_hw)
    return window


def track_frames(instances: Iterable[OpInstance], frame_indices: Sequence[int]) -> tuple[int, ...]:
    """The source frame index of each output frame, through the temporal ops."""
    indices = tuple(frame_indices)
    for inst in instances:
        order = get_op(inst.name).frame_order(dict(inst.params), dict(inst.drawn), len(indices))
        indices = tuple(indices[i] for i in order)
    return indices


def _round_half_up(value: float) -> int:
    return int(np.floor(value + 0.5))


def crop_box(window: Window) -> list[int] | None:
    """[x, y, w, h] in source pixels (edges rounded) when a crop was applied, else None."""
    if not window.cropped:
        return None
    x0, y0 = _round_half_up(window.x), _round_half_up(window.y)
    x1, y1 = _round_half_up(window.x + window.w), _round_half_up(window.y + window.h)
    return [x0, y0, x1 - x0, y1 - y0]


# the steps counted as crop operations in statistics (status.json, `sandfs plan`)
CROP_OPS = frozenset({"random_crop", "random_resized_crop", "center_crop"})

for _op_type in BUILTIN_OPS:
    register_op(_op_type)
