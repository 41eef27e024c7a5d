"""Stream paths whose clips differ only in their frames and their random ops' draws: no branch
is drawn or chosen by a condition, no op is temporal and no random op's output size depends on
what it draws. Such a path's ops, shapes, depths and branch records are the same for every clip
of one frame size (a `Template`); a clip is its template with its random ops drawn, not the
path walked again op by op (planning a window spent most of its time there).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sandfs import ops as oplib
from sandfs.config.schema import OpSpec
from sandfs.ops.base import FrameShape, OpInstance, OpType
from sandfs.plan.abstract import StreamPath
from sandfs.plan.draws import FirstOutput, NeedGenerator
from sandfs.plan.interner import INTERNED_MAX
from sandfs.plan.records import ClipPath, StreamClip
from sandfs.plan.seeds import clip_rng
from sandfs.plan.steps import branch_label, source_shape, step_ops

if TYPE_CHECKING:
    from sandfs.media.types import VideoInfo
    from sandfs.plan.clipdraws import EpochDraws, Prefix
    from sandfs.plan.task import TaskPlan


@dataclass(frozen=True, slots=True)
class RandomOp:
    """A random op of a template: where its instance goes, and what it draws from."""

    index: int  # in the template's ops
    spec: OpSpec
    in_hw: tuple[int, int]
    static: FrameShape  # its input as far as the config says (a shared crop's context)
    key: tuple[Prefix, int]  # (prefix, position): its generator's (`ClipDraws.op_keys`)


@dataclass(frozen=True, slots=True)
class Template:
    ops: tuple[OpInstance | None, ...]  # the spatial ops; None where a random op goes
    randoms: tuple[RandomOp, ...]


class Codebook:
    """A template's ops tuples by the code of their draws (`drawn_codes`), each made once, in
    a list that only grows (a table indexing it keeps what it indexes); its path's books are
    replaced together once they hold INTERNED_MAX tuples (`Shelf`)."""

    __slots__ = ("_codes", "_places", "_shelf", "ops")

    def __init__(self, shelf: Shelf) -> None:
        self._codes = self._places = np.zeros(0, np.int64)  # sorted codes, their places
        self.ops: list[tuple[OpInstance, ...]] = []
        self._shelf = shelf

    def __len__(self) -> int:
        return len(self.ops)

    def places_of(self, code: np.ndarray, make: Callable[[int], tuple]
                  ) -> tuple[list, np.ndarray]:
        """`ops` and each code's place in it; `make(i)`: the ops of `code[i]`, made where its
        code has none yet. New codes are merged into the sorted ones (no sort of the book)."""
        distinct, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        with self._shelf.lock:
            at = np.searchsorted(self._codes, distinct)
            known = np.zeros(len(distinct), bool)
            inside = at < len(self._codes)
            known[inside] = self._codes[at[inside]] == distinct[inside]
            fresh = np.flatnonzero(~known)
            if len(fresh):
                places = np.arange(len(self.ops), len(self.ops) + len(fresh))
                self.ops += [make(i) for i in first[fresh].tolist()]
                self._shelf.size += len(fresh)
                self._codes = np.insert(self._codes, at[fresh], distinct[fresh])
                self._places = np.insert(self._places, at[fresh], places)
                at = np.searchsorted(self._codes, distinct)
            return self.ops, self._places[at][inverse]


class Shelf:
    """A path's codebooks, by template, and the ops tuples they hold together: replaced as a
    whole once those reach INTERNED_MAX (one book a frame size: 100 sizes held 100 times
    that). A thread still adding to a book of an older shelf goes on; tables keep its list."""

    __slots__ = ("books", "lock", "size")

    def __init__(self) -> None:
        self.books: dict[int, Codebook] = {}  # by id(template): kept as long as the path
        self.lock = threading.Lock()  # planning threads add to one list
        self.size = 0


class StaticPath:
    """A plain stream path of one task: its templates, and the op instances drawn into them."""

    def __init__(self, plan: TaskPlan, path: StreamPath, stream: int,
                 clip_path: ClipPath) -> None:
        self.plan, self.path, self.stream = plan, path, stream
        self.clip_path = clip_path  # the same for every clip
        self._templates: dict[tuple, Template] = {}
        self._instances: dict[tuple, OpInstance] = {}  # `first_drawn`
        self._shelf = Shelf()  # `codebook`

    @classmethod
    def of(cls, plan: TaskPlan, path: StreamPath, stream: int) -> StaticPath | None:
        """The path as a StaticPath, or None when its clips need walking one by one."""
        if plan.test_views or any(ps.step.branch_type in ("random", "conditional")
                                  for ps in path.steps):
            return None
        for ps in path.steps:
            for spec in step_ops(ps, None):
                op = oplib.get_op(spec.name)
                if op.temporal or (op.random and type(op).drawn_shape is not OpType.drawn_shape):
                    return None
        depths = tuple(len([s for ps in path.steps[: i + 1] for s in step_ops(ps, None)])
                       for i in range(len(path.steps)))
        branches = tuple((ps.step.name, branch_label(ps, None)) for ps in path.steps)
        return cls(plan, path, stream, plan.shared(ClipPath(plan.shared(depths),
                                                           plan.shared(branches), plan.source)))

    def template(self, shape: FrameShape,
                 fixed: Callable[[OpSpec, tuple[int, int]], OpInstance],
                 shape_after: Callable[[oplib.OpType, OpSpec, FrameShape], FrameShape]
                 ) -> Template:
        """The path's ops on frames of `shape` (`fixed`, `shape_after`: the plan's caches)."""
        found = self._templates.get((shape.height, shape.width))
        if found is not None:
            return found
        start, static = shape, source_shape(self.plan.cfg)
        ops: list[OpInstance | None] = []
        randoms = []
        prefix: Prefix = ()
        for ps in self.path.steps:
            prefix += ((ps.step.name, ps.output_index),)
            for pos, spec in enumerate(step_ops(ps, None)):
                op = oplib.get_op(spec.name)
                in_hw = (shape.height, shape.width)
                if op.random:
                    randoms.append(RandomOp(len(ops), spec, in_hw, static, (prefix, pos)))
                    ops.append(None)
                else:
                    ops.append(fixed(spec, in_hw))
                shape = shape_after(op, spec, shape)
                static = shape_after(op, spec, static)
        found = self._templates[(start.height, start.width)] = Template(tuple(ops),
                                                                        tuple(randoms))
        return found

    def codebook(self, template: Template) -> Codebook:
        """The template's ops by the code of their draws (columns.py), on a new shelf once
        the path's books hold INTERNED_MAX tuples (the tables holding the last keep them)."""
        shelf = self._shelf
        with shelf.lock:
            if shelf.size >= INTERNED_MAX:
                shelf = self._shelf = Shelf()
            found = shelf.books.get(id(template))
            if found is None:
                found = shelf.books[id(template)] = Codebook(shelf)
            return found

    def first_drawn(self, random: RandomOp, output: int) -> OpInstance:
        """The op drawn from its generator's first output: one instance for equal draws, kept
        by what the op's `draw` returns (`draw_instance` normalizes it, and costs more)."""
        spec = random.spec
        drawn = oplib.get_op(spec.name).draw(dict(spec.params), FirstOutput(output),
                                             random.in_hw)
        key = (random.index, random.in_hw, drawn)
        try:
            found = self._instances.get(key)
        except TypeError:  # an op whose draw returns a mapping
            found = None
            key = None
        if found is None:
            if len(self._instances) >= INTERNED_MAX:
                self._instances.clear()
            found = self.plan.shared(oplib.draw_instance(spec.name, spec.params,
                                                         FirstOutput(output), random.in_hw))
            if key is not None:
                self._instances[key] = found
        return found

    def instance(self, random: RandomOp, output: int, row: tuple[EpochDraws, VideoInfo, int],
                 clip_key: tuple) -> OpInstance:
        """A random op of a clip drawn from its generator's first `output` (`row`: the epoch's
        draws, the video and the sample; `clip_key`: its generators' keys, where one is
        needed). A crop in a window shared with other tasks is drawn as the walk draws it."""
        draws, info, sample = row
        if draws.crops_shared and random.spec.name == "random_crop":
            return self.plan.random_instance(random.spec, random.in_hw, random.static,
                                             clip_key[1], info, sample, output,
                                             (*clip_key, "op", *random.key))
        try:
            return self.first_drawn(random, output)
        except NeedGenerator:
            spec = random.spec
            return self.plan.shared(oplib.draw_instance(
                spec.name, spec.params, clip_rng(*clip_key, "op", *random.key), random.in_hw))

    def clip(self, template: Template, row: tuple[EpochDraws, int, int], clip_key: tuple,
             frames: tuple[int, ...], info: VideoInfo) -> StreamClip:
        """One clip: its template with its random ops drawn (`row`: the epoch's draws, the
        video and the sample; `clip_key`: its generators' keys, where one is needed)."""
        draws, video, sample = row
        ops = list(template.ops)
        for random in template.randoms:
            output = int(draws.outputs[random.key][video, sample])
            ops[random.index] = self.instance(random, output, (draws, info, sample), clip_key)
        shared = self.plan.shared
        return StreamClip(video, sample, self.stream, shared(frames), shared(tuple(ops)),
                          self.clip_path)
