"""The `augmentation:` section: parse its steps, check that they form one DAG from `frame` to a
single output, and propagate static frame shapes so that batches are known to stack."""

from __future__ import annotations

import graphlib
import heapq
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from sandfs import ops as op_registry
from sandfs.config import fields
from sandfs.config.condition import compile_condition
from sandfs.config.schema import AugStep, Branch, Condition, DatasetConfig, OpSpec
from sandfs.config.yamlsafe import ConfigError, Value
from sandfs.ops.base import FrameShape, OpParamError

SOURCE_STREAM = "frame"  # the decoded clip every pipeline starts from
ELSE = "else"
PROB_TOLERANCE = 1e-3  # three branches of 0.333 each; the planner scales them to sum to 1
BRANCH_TYPES = ("single", "conditional", "random", "multi", "merge")
COMMON_KEYS = ("name", "branch_type", "inputs", "outputs")
EXTRA_KEYS = {
    "single": ("config",),
    "conditional": ("branches",),
    "random": ("branches",),
    "multi": ("branches", "config"),
    "merge": (),
}
BRANCH_KEYS = {
    "conditional": ("condition", "config"),
    "random": ("prob", "config"),
    "multi": ("config",),
}
_ALL_STEP_KEYS = (*COMMON_KEYS, "branches", "config")
_STREAM_RE = re.compile(r"[A-Za-z0-9_.-]+")
_STEP_NAME_RE = re.compile(r"[^\x00-\x1f\x7f]+")
# (inputs, outputs) each as (minimum, maximum); None = no maximum.
_ARITY = {
    "single": ((1, 1), (1, 1)),
    "conditional": ((1, 1), (1, 1)),
    "random": ((1, 1), (1, 1)),
    "multi": ((1, 1), (2, None)),
    "merge": ((2, None), (1, 1)),
}

Shape = tuple[FrameShape, int]  # a frame's shape and the clip's frame count


@dataclass(slots=True)
class _ParsedStep:
    """A step with the YAML values it came from, so later checks can point at them."""

    step: AugStep
    value: Value
    branch_values: list[Value]  # one per branch (for single: its `config`)
    op_values: list[list[Value]]  # per branch, each op's `- name: params` entry


def parse_pipeline(value: Value, frames_per_video: int,
                   source_hw: tuple[int, int] | None = None) -> tuple[AugStep, ...]:
    """Validate the `augmentation:` list; return its steps in a topological order (the file's
    order when it is one). `source_hw`: the size frames are decoded at, when fixed."""
    items = fields.sequence(value, "augmentation steps")
    if not items:
        raise value.error(
            "at least one step is needed: the pipeline must end in a fixed frame size "
            "(a resize or crop) so that batches stack"
        )
    parsed = [_parse_step(item) for item in items]
    _check_unique_names(parsed)
    order, final = _check_graph(parsed)
    _check_shapes(parsed, order, final, frames_per_video, source_hw)
    return tuple(parsed[i].step for i in order)


def view_shape(dataset: DatasetConfig) -> tuple[tuple[int, ...], str]:
    """The array shape and dtype of a full batch's view: every clip of the batch once per path
    from `frame` to the final output (the pipeline is validated, so the size is fixed)."""
    sampling = dataset.sampling
    source = sampling.decode_resize[0] if sampling.decode_resize else (None, None)
    start = FrameShape(*source, "uint8")
    shapes: dict[str, Shape] = {SOURCE_STREAM: (start, sampling.frames_per_video)}
    paths = {SOURCE_STREAM: 1}
    for step in dataset.augmentation:
        given = shapes[step.inputs[0]]
        if step.branch_type == "merge":
            results = [given]
        elif step.branch_type == "single":
            results = [op_registry.chain_shape(_params(step.ops), *given)]
        else:
            results = [op_registry.chain_shape(_params(b.ops), *given) for b in step.branches]
        for i, output in enumerate(step.outputs):
            shapes[output] = results[i if step.branch_type == "multi" else 0]
            paths[output] = sum(paths[s] for s in step.inputs)
    consumed = {s for step in dataset.augmentation for s in step.inputs}
    final = next(s for step in dataset.augmentation for s in step.outputs if s not in consumed)
    (frame, frames), count = shapes[final], paths[final]
    clips = sampling.videos_per_batch * sampling.samples_per_video * count
    if sampling.layout == "NCTHW":
        return (clips, 3, frames, frame.height, frame.width), frame.dtype
    return (clips, frames, frame.height, frame.width, 3), frame.dtype


def _params(ops: tuple[OpSpec, ...]) -> list[tuple[str, Any]]:
    return [(spec.name, spec.params) for spec in ops]


# --- steps -------------------------------------------------------------------------------------


def _parse_step(value: Value) -> _ParsedStep:
    entries = fields.mapping(value, _ALL_STEP_KEYS, required=COMMON_KEYS)
    kind = fields.choice(entries["branch_type"], BRANCH_TYPES)
    allowed = COMMON_KEYS + EXTRA_KEYS[kind]
    for key in entries:
        if key not in allowed:
            raise value.key_error(
                key, f"a {kind} step takes no {key!r}; allowed keys: {', '.join(allowed)}"
            )
    name = fields.string(entries["name"], pattern=_STEP_NAME_RE, what="a step name")
    inputs = _streams(entries["inputs"], _ARITY[kind][0], f"a {kind} step", "input")
    outputs = _streams(entries["outputs"], _ARITY[kind][1], f"a {kind} step", "output")
    step = AugStep(name, kind, inputs, outputs, line=value.line)
    if kind == "merge":
        return _ParsedStep(step, value, [], [])
    if kind == "single":
        return _parse_single(step, value)
    if kind == "multi":
        return _parse_multi(step, value)
    return _parse_branches(step, value)


def _streams(value: Value, arity: tuple[int, int | None], who: str, role: str) -> tuple[str, ...]:
    items = fields.sequence(value, f"{role} stream names, e.g. [{SOURCE_STREAM}]")
    names = [
        fields.string(item, pattern=_STREAM_RE, what="a stream name [A-Za-z0-9_.-]+")
        for item in items
    ]
    low, high = arity
    if len(names) < low or (high is not None and len(names) > high):
        count = f"exactly {low}" if low == high else f"at least {low}"
        raise value.error(f"{who} takes {count} {role} stream(s), got {len(names)}")
    for i, name in enumerate(names):
        if name in names[:i]:
            raise items[i].error(f"stream {name!r} is listed twice")
    return tuple(names)


def _parse_single(step: AugStep, value: Value) -> _ParsedStep:
    config = _required(value, "config", "single")
    ops, op_values = _ops(config)
    return _ParsedStep(replace(step, ops=ops), value, [config], [op_values])


def _parse_multi(step: AugStep, value: Value) -> _ParsedStep:
    entries, count = value.data, len(step.outputs)
    if "branches" in entries and "config" in entries:
        raise value.key_error(
            "config",
            "give either `branches:` (one per output) or `config:` "
            "(applied to every output), not both",
        )
    if "config" in entries:
        config = entries["config"]
        ops, op_values = _ops(config)
        branches = tuple(Branch(ops, line=config.line) for _ in range(count))
        return _ParsedStep(
            replace(step, branches=branches), value, [config] * count, [op_values] * count
        )
    branches_value = _required(
        value,
        "branches",
        "multi",
        hint="; or give `config:` to apply one list of ops to every output",
    )
    if len(fields.sequence(branches_value, "branches")) != count:
        raise branches_value.error(
            f"a multi step needs one branch per output: {count} "
            f"outputs, {len(branches_value.data)} branches"
        )
    return _parse_branches(step, value)


def _parse_branches(step: AugStep, value: Value) -> _ParsedStep:
    """The `branches:` of a random, conditional or multi step."""
    kind = step.branch_type
    branches_value = _required(value, "branches", kind)
    items = fields.sequence(branches_value, "branches", min_len=1)
    branches, op_values = [], []
    for i, item in enumerate(items):
        entries = fields.mapping(item, BRANCH_KEYS[kind], required=BRANCH_KEYS[kind])
        ops, values = _ops(entries["config"])
        prob = _probability(entries["prob"]) if kind == "random" else None
        condition = None
        if kind == "conditional":
            condition = _condition(entries["condition"], is_last=i == len(items) - 1)
        branches.append(Branch(ops, prob=prob, condition=condition, line=item.line))
        op_values.append(values)
    if kind == "random":
        total = math.fsum(b.prob or 0.0 for b in branches)
        if abs(total - 1) > PROB_TOLERANCE:
            raise branches_value.error(f"branch probabilities must sum to 1 (within "
                                       f"{PROB_TOLERANCE:g}), got {total:g}")
    return _ParsedStep(replace(step, branches=tuple(branches)), value, items, op_values)


def _probability(value: Value) -> float:
    prob = fields.number(value)
    if not 0 <= prob <= 1:
        raise value.error(f"a probability must be in [0, 1], got {prob:g}")
    return prob


def _condition(value: Value, *, is_last: bool) -> Condition | None:
    text = fields.string(value, what=f"an expression over epoch, iteration, task, or {ELSE!r}")
    if text.strip() == ELSE:
        if not is_last:
            raise value.error(f"{ELSE!r} must be the last branch")
        return None
    try:
        tree = compile_condition(text)
    except ValueError as e:
        raise value.error(f"invalid condition: {e}") from None
    return Condition(text.strip(), tree)


def _required(value: Value, key: str, kind: str, hint: str = "") -> Value:
    if key not in value.data:
        raise value.key_error(key, f"required key is missing for a {kind} step{hint}")
    return value.data[key]


# --- ops ---------------------------------------------------------------------------------------


def _ops(value: Value) -> tuple[tuple[OpSpec, ...], list[Value]]:
    """A `config:` list. Null, `None` (Figure 9 writes it) and [] mean no ops (identity)."""
    if value.data is None or value.data == "None" or value.data == []:
        return (), []
    items = fields.sequence(value, "ops, e.g. `- resize: {shape: [224, 224]}`")
    return tuple(_op(item) for item in items), items


def _op(item: Value) -> OpSpec:
    if not isinstance(item.data, dict) or len(item.data) != 1:
        raise item.error(
            "expected one op as a one-key mapping, e.g. "
            f"`- resize: {{shape: [224, 224]}}`, got {fields.describe(item)}"
        )
    ((name, params),) = item.data.items()
    try:
        normalized = op_registry.validate_op(name, _op_params(params))
    except KeyError as e:
        raise item.key_error(name, e.args[0] if e.args else f"unknown op {name!r}") from None
    except OpParamError as e:
        raise _param_error(item, name, e) from None
    return OpSpec(name, tuple(normalized), line=item.line)


def _op_params(value: Value) -> dict[str, Any] | None:
    """`op: true` and `op: null` mean no parameters (Figure 9's `inv_sample: true`)."""
    if value.data is None or value.data is True:
        return None
    if not isinstance(value.data, dict):
        raise value.error(
            "expected the op's parameters as a mapping, or true/null for none; "
            f"got {fields.describe(value)}"
        )
    _reject_non_finite(value)
    return fields.plain(value)


def _reject_non_finite(value: Value) -> None:
    # NaN != NaN would make two identical pipelines unequal (no sharing, no cache hits).
    if isinstance(value.data, float):
        fields.number(value)
    elif isinstance(value.data, dict):
        for child in value.data.values():
            _reject_non_finite(child)
    elif isinstance(value.data, list):
        for child in value.data:
            _reject_non_finite(child)


def _param_error(item: Value, op_name: str, error: OpParamError) -> ConfigError:
    """Point at the parameter the registry named, or at the op when it named none."""
    params = item.data[op_name]
    if not error.key:
        return params.error(error.message)
    if isinstance(params.data, dict) and error.key in params.data:
        return params.data[error.key].error(error.message)
    return params.key_error(error.key, error.message)


# --- graph -------------------------------------------------------------------------------------


def _check_unique_names(parsed: list[_ParsedStep]) -> None:
    seen: dict[str, int] = {}
    for p in parsed:
        if p.step.name in seen:
            raise p.value.data["name"].error(
                f"step name {p.step.name!r} is already used (line {seen[p.step.name]})"
            )
        seen[p.step.name] = p.value.data["name"].line


def _check_graph(parsed: list[_ParsedStep]) -> tuple[list[int], str]:
    """Check the streams form one DAG from `frame`; return a topological order and the final
    stream. Every stream is produced once and consumed at most once (fan out with `multi`)."""
    producer = _producers(parsed)
    consumer: dict[str, int] = {}
    for i, p in enumerate(parsed):
        for stream, where in zip(p.step.inputs, p.value.data["inputs"].data, strict=True):
            if stream != SOURCE_STREAM and stream not in producer:
                known = [SOURCE_STREAM, *producer]
                raise where.error(
                    f"stream {stream!r} is produced by no step"
                    f"{fields.did_you_mean(stream, known)}; "
                    f"streams: {', '.join(known)}"
                )
            if stream in consumer:
                raise where.error(
                    f"stream {stream!r} is already an input of step "
                    f"{parsed[consumer[stream]].step.name!r}; use a multi step "
                    "to feed several branches from one stream"
                )
            consumer[stream] = i
    edges = {(producer[s], c) for s, c in consumer.items() if s != SOURCE_STREAM}
    try:
        order = _topological_order(len(parsed), edges)
    except graphlib.CycleError as error:
        steps = error.args[1][:-1]  # graphlib repeats the first step at the end
        names = " -> ".join(parsed[i].step.name for i in [*steps, steps[0]])
        raise parsed[min(steps)].value.data["inputs"].error(
            f"the steps form a cycle: {names}") from None
    finals = [s for s in producer if s not in consumer]
    if len(finals) > 1:
        last = parsed[producer[finals[-1]]].value.data["outputs"]
        raise last.error(
            f"the pipeline has {len(finals)} final outputs ({', '.join(finals)}); "
            "exactly one stream may be left unused (join branches with a merge step)"
        )
    return order, finals[0]


def _producers(parsed: list[_ParsedStep]) -> dict[str, int]:
    producer: dict[str, int] = {}
    for i, p in enumerate(parsed):
        for stream, where in zip(p.step.outputs, p.value.data["outputs"].data, strict=True):
            if stream == SOURCE_STREAM:
                raise where.error(f"{SOURCE_STREAM!r} is the decoded source; no step may output it")
            if stream in producer:
                raise where.error(
                    f"stream {stream!r} is already an output of step "
                    f"{parsed[producer[stream]].step.name!r}"
                )
            producer[stream] = i
    return producer


# The standard library's graphlib, not networkx: it keeps networkx (0.06 s to import) out of the
# command line's config check, which runs before the daemon starts.


def _topological_order(count: int, edges: set[tuple[int, int]]) -> list[int]:
    """Every step after the steps it reads from; among the steps ready, the first written
    first (the same order for the same config). graphlib.CycleError if they form a cycle."""
    sorter = graphlib.TopologicalSorter({step: set() for step in range(count)})
    for u, v in edges:
        sorter.add(v, u)
    sorter.prepare()
    ready, order = [], []
    while sorter.is_active():
        for step in sorter.get_ready():
            heapq.heappush(ready, step)
        order.append(heapq.heappop(ready))
        sorter.done(order[-1])
    return order


# --- shapes ------------------------------------------------------------------------------------


def _check_shapes(parsed: list[_ParsedStep], order: list[int], final: str, frames: int,
                  source_hw: tuple[int, int] | None) -> None:
    height, width = source_hw or (None, None)
    shapes: dict[str, Shape] = {SOURCE_STREAM: (FrameShape(height, width, "uint8"), frames)}
    for i in order:
        p = parsed[i]
        outputs = _step_shapes(p, [shapes[s] for s in p.step.inputs])
        shapes.update(zip(p.step.outputs, outputs, strict=True))
    shape, _ = shapes[final]
    if shape.height is None or shape.width is None:
        producer = next(p for p in parsed if final in p.step.outputs)
        raise producer.value.data["outputs"].error(
            f"the pipeline ends in frames of unknown size ({_describe_shape(shapes[final])}); "
            "it needs a resize or crop so that batches stack"
        )


def _step_shapes(p: _ParsedStep, inputs: list[Shape]) -> list[Shape]:
    kind = p.step.branch_type
    if kind == "merge":
        _same_shapes(
            p.value.data["inputs"],
            list(zip(p.step.inputs, inputs, strict=True)),
            "merged streams must have the same frame shape and count",
        )
        return [inputs[0]]
    branch_ops = [p.step.ops] if kind == "single" else [b.ops for b in p.step.branches]
    results = [
        _chain(ops, op_values, inputs[0])
        for ops, op_values in zip(branch_ops, p.op_values, strict=True)
    ]
    if kind == "multi":
        return results
    if kind in ("random", "conditional"):
        _same_branch_shapes(p, inputs[0], results)
    return results[:1]


def _same_branch_shapes(p: _ParsedStep, given: Shape, results: list[Shape]) -> None:
    has_else = p.step.branches[-1].condition is None
    if p.step.branch_type == "conditional" and not has_else and given not in results:
        raise p.value.data["branches"].error(
            f"without a `condition: {ELSE}` branch a clip can pass through unchanged "
            f"({_describe_shape(given)}), but branch 0 gives {_describe_shape(results[0])}; "
            f"add an {ELSE} branch or keep the shape"
        )
    for i, shape in enumerate(results):
        if shape != results[0]:
            raise p.branch_values[i].error(
                "every branch must give the same frame shape and count: branch 0 gives "
                f"{_describe_shape(results[0])}, branch {i} gives {_describe_shape(shape)}"
            )


def _same_shapes(where: Value, named: list[tuple[str, Shape]], message: str) -> None:
    if any(shape != named[0][1] for _, shape in named):
        details = ", ".join(f"{name} is {_describe_shape(shape)}" for name, shape in named)
        raise where.error(f"{message}: {details}")


def _chain(ops: tuple[OpSpec, ...], op_values: list[Value], given: Shape) -> Shape:
    shape, frames = given
    for spec, item in zip(ops, op_values, strict=True):
        try:
            shape, frames = op_registry.chain_shape([(spec.name, spec.params)], shape, frames)
        except OpParamError as e:
            raise _param_error(item, spec.name, e) from None
        except ValueError as e:
            raise _param_error(item, spec.name, OpParamError("", str(e))) from None
        if frames < 1:
            raise item.data[spec.name].error(f"{spec.name} leaves no frames in the clip")
    return shape, frames


def _describe_shape(shape: Shape) -> str:
    frame, count = shape
    height = "?" if frame.height is None else frame.height
    width = "?" if frame.width is None else frame.width
    return f"{height}x{width} {frame.dtype}, {count} frames"
