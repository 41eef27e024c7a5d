"""A task epoch's batches resolved at once, into the columns of one `ClipTable`: each batch a
`ViewPlan` whose clips are a range of the table's rows (`TableClips`).

Where every stream path of the task is plain (`StaticPath`: no branch drawn or chosen, no
temporal op, no test view), no clip is made: each clip's video, sample and stream, its frame
list (one a start on the frame pool), its ops (its template with its random ops drawn, one
tuple for equal draws) and its path are numpy columns computed from the epoch's draws. A
random op whose draw from its generator's first output is known here (a crop's two origins, a
coin: `drawn_codes`) is drawn for all the clips at once as a code, equal codes being equal
draws; other ops, and a draw numpy would reject, are drawn clip by clip. Other tasks resolve
their batches clip by clip, as one batch on demand is. Both give the clips resolving them one
by one gives (`TaskPlan.resolve_clip`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sandfs import ops as oplib
from sandfs.ops.base import FrameShape, OpInstance
from sandfs.ops.checks import CoinOp
from sandfs.ops.geometry import RandomCrop, cover_hw
from sandfs.plan.cliptable import ClipTable, TableClips, distinct
from sandfs.plan.draws import below, first_integers, first_units
from sandfs.plan.pool import FramePool
from sandfs.plan.records import ViewPlan

if TYPE_CHECKING:
    from sandfs.config.schema import Sampling
    from sandfs.plan.clipdraws import EpochDraws
    from sandfs.plan.staticpath import RandomOp, StaticPath, Template
    from sandfs.plan.task import TaskPlan

_CODES_MAX = 1 << 62  # combined codes of a template's random ops stay int64


def frame_list(sampling: Sampling, num_frames: int, start: int | None) -> tuple[int, ...]:
    """A clip's decoded frames: `frames_per_video` indices `frame_stride` apart from `start`,
    or (None) those of a video shorter than the clip's span (`short_video`)."""
    count, stride = sampling.frames_per_video, sampling.frame_stride
    if start is not None:
        return tuple(range(start, start + count * stride, stride))
    if sampling.short_video == "wrap":
        return tuple((j * stride) % num_frames for j in range(count))
    return tuple(min(j * stride, num_frames - 1) for j in range(count))


def resolve_batches(plan: TaskPlan, epoch: int,
                    iterations: Sequence[int]) -> list[ViewPlan | Exception]:
    """Each batch's view, its clips rows of one new table, or why it cannot be made (its
    videos: `NoUsableVideo`; a condition: `ConditionError`; a bug): a batch fails alone."""
    found: list[ViewPlan | Exception | None] = [None] * len(iterations)
    held: list[tuple[int, ViewPlan | list[int]]] = []  # (place in `found`, its view or videos)
    plain = all(plan.static_paths)
    drawn = plan.draws.drawn(epoch)
    taken = (drawn.take_batches(iterations) if plain and drawn is not None
             else [None] * len(iterations))
    for place, (iteration, videos) in enumerate(zip(iterations, taken, strict=True)):
        try:
            if not plain:
                held.append((place, plan.resolve_view(epoch, iteration)))
                continue
            held.append((place, plan.batch_videos(epoch, iteration) if videos is None
                         else videos))
        except Exception as exc:  # the batch's reason, given to its caller
            found[place] = exc
    if held and plain:
        views = _plain_views(plan, epoch, [iterations[p] for p, _ in held], [v for _, v in held])
    else:  # resolved clip by clip: the same rows, distinct parts found by identity
        walked = [view for _, view in held]
        views = [ViewPlan(v.task, v.epoch, v.iteration, clips, v.shape, v.dtype, v.layout)
                 for v, clips in zip(walked, ClipTable.of([v.clips for v in walked]),
                                     strict=True)]
    for (place, _), view in zip(held, views, strict=True):
        found[place] = view
    return found  # type: ignore[return-value]


def _plain_views(plan: TaskPlan, epoch: int, iterations: list[int],
                 videos: list[list[int]]) -> list[ViewPlan]:
    """The batches of a task whose stream paths are all plain, as columns."""
    flat = np.array([v for batch in videos for v in batch], np.int64)
    draws = plan.draws.prepare(epoch, flat)
    samples, streams = plan.sampling.samples_per_video, len(plan.paths)
    counts = np.array([len(batch) for batch in videos], np.int64)
    per_stream = counts * samples
    rows = per_stream * streams  # a batch's: stream-major, then video, then sample
    first_row = np.cumsum(rows) - rows
    batch = np.repeat(np.arange(len(videos)), rows)
    stream, rest = np.divmod(np.arange(int(rows.sum())) - first_row[batch], per_stream[batch])
    place, sample = np.divmod(rest, samples)
    video = flat[(np.cumsum(counts) - counts)[batch] + place]
    paths, path_of_stream = distinct([fast.clip_path for fast in plan.static_paths])
    table = ClipTable.of_columns(video, sample, stream, _frame_lists(plan, draws, video, sample),
                                 _op_lists(plan, draws, epoch, video, sample, stream),
                                 (paths, np.asarray(path_of_stream)[stream]))
    return [ViewPlan(plan.name, epoch, iteration, TableClips(table, start, count),
                     plan.view_shape(len(batch)), plan.out_dtype, plan.sampling.layout)
            for iteration, batch, start, count in zip(iterations, videos, first_row.tolist(),
                                                      rows.tolist(), strict=True)]


def _frame_lists(plan: TaskPlan, draws: EpochDraws, video: np.ndarray,
                 sample: np.ndarray) -> tuple[list, np.ndarray]:
    """Each clip's frame list: one for a start on the pool (its key), one for a short video's
    length (minus one minus it)."""
    num_frames = draws.sizes[video, 0].astype(np.int64)
    key = np.where(num_frames >= plan.span_frames, draws.starts[video, sample], -1 - num_frames)
    keys, index = np.unique(key, return_inverse=True)
    return [plan.shared(frame_list(plan.sampling, 0, k) if k >= 0 else
                        frame_list(plan.sampling, -1 - k, None)) for k in keys.tolist()], index


def _op_lists(plan: TaskPlan, draws: EpochDraws, epoch: int, video: np.ndarray,
              sample: np.ndarray, stream: np.ndarray) -> tuple[list, np.ndarray]:
    """Each clip's ops: grouped by template (stream and frame size), then by draws."""
    fixed = plan.source_shape
    size = (np.zeros(len(video), np.int64) if fixed.height else
            draws.sizes[video, 1].astype(np.int64) << 32 | draws.sizes[video, 2])
    sizes, size_index = np.unique(size, return_inverse=True)
    group = stream * len(sizes) + size_index
    order = np.argsort(group, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(group[order])) + 1) if len(order) else []
    made: list = []
    column = np.empty(len(video), np.int64)
    for rows in groups:
        g = int(group[rows[0]])
        fast = plan.static_paths[g // len(sizes)]
        hw = int(sizes[g % len(sizes)])
        shape = fixed if fixed.height else FrameShape(hw >> 32, hw & 0xFFFFFFFF, "uint8")
        template = fast.template(shape, plan._fixed_instance, plan._shape_after)
        ops, index = _template_ops(plan, fast, template, draws, (epoch, video[rows],
                                                                  sample[rows]))
        if len(groups) == 1:  # the template's own list, shared by the tables holding it
            return ops, index
        used, index = np.unique(index, return_inverse=True)
        column[rows] = index + len(made)
        made += [ops[i] for i in used.tolist()]
    return made, column


def _template_ops(plan: TaskPlan, fast: StaticPath, template: Template, draws: EpochDraws,
                  clips: tuple[int, np.ndarray, np.ndarray]) -> tuple[list, np.ndarray]:
    """The ops of clips of one template: a list of tuples, each clip's index in it."""
    epoch, video, sample = clips
    outputs = [draws.outputs[random.key][video, sample] for random in template.randoms]
    code, codes = np.zeros(len(video), np.int64), []  # the clips', and each op's
    alone = np.zeros(len(video), bool)  # clips whose ops are drawn one at a time
    radix = 1
    for random, output in zip(template.randoms, outputs, strict=True):
        window = (plan.crop_window(random.spec, random.in_hw, random.static, epoch)
                  if draws.crops_shared and random.spec.name == "random_crop" else None)
        found = drawn_codes(random, output) if window is None else _shared_crop_codes(
            plan, random, (epoch, *window), (video, sample), output)
        radix *= 1 if found is None else found[2]
        if found is None or radix >= _CODES_MAX:
            alone[:] = True
            break
        code = code * found[2] + found[0]
        codes.append(found[0])
        alone |= found[1]
    coded = np.flatnonzero(~alone)
    made, index = [], np.empty(len(video), np.int64)
    if len(coded):
        book = fast.codebook(template)
        made, index[coded] = book.places_of(code[coded], lambda i: _ops_of(
            plan, fast, template, [(int(o[coded[i]]), int(c[coded[i]]))
                                   for o, c in zip(outputs, codes, strict=True)]))
    if alone.any():
        made = list(made)  # not the codebook's
        for row in np.flatnonzero(alone).tolist():
            index[row] = len(made)
            made.append(_drawn_ops(plan, fast, template, draws, outputs,
                                   (epoch, int(video[row]), int(sample[row]), row)))
    return made, index


def _ops_of(plan: TaskPlan, fast: StaticPath, template: Template,
            drawn: list[tuple[int, int]]) -> tuple[OpInstance, ...]:
    """The ops of a clip whose random ops drew these (their first output and code, none
    needing more): a crop is made from its code (its place, shared with other tasks or not),
    another op drawn again from its output."""
    ops = list(template.ops)
    for random, (output, code) in zip(template.randoms, drawn, strict=True):
        if type(oplib.get_op(random.spec.name)).draw is RandomCrop.draw:
            y, x = divmod(code, _crop_spans(random)[1])
            ops[random.index] = plan.shared(OpInstance(random.spec.name, random.spec.params,
                                                       (("x", x), ("y", y))))
        else:
            ops[random.index] = fast.first_drawn(random, output)
    return plan.shared(tuple(ops))


def _shared_crop_codes(plan: TaskPlan, random: RandomOp,
                       where: tuple[int, tuple[int, int], tuple],
                       clips: tuple[np.ndarray, np.ndarray], outputs: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """`drawn_codes` of a random crop in a window shared with other tasks (`where`: the epoch,
    the window and its context, `TaskPlan.crop_window`): the window's place is the pool's draw
    for the clip, the crop's place in it the task's own, as `TaskPlan._shared_crop` draws
    them."""
    epoch, (window_h, window_w), context = where
    video, sample = clips
    (in_h, in_w), (crop_h, crop_w) = random.in_hw, random.spec.param_dict()["size"]
    found = first_integers(outputs, (window_h - crop_h + 1, window_w - crop_w + 1))
    if found is None:
        return None
    (dy, dx), need = found
    units = FramePool.crop_units(plan.draws.pool_words(epoch, video),
                                 epoch + plan.epoch_offset, sample, context)
    y = below(np.int64(in_h - window_h + 1), units[:, 0]) + dy
    x = below(np.int64(in_w - window_w + 1), units[:, 1]) + dx
    spans = _crop_spans(random)
    return y * spans[1] + x, need, spans[0] * spans[1]


def _crop_spans(random: RandomOp) -> tuple[int, int]:
    """The places a random crop may take in its frame, down and across."""
    size = random.spec.param_dict()["size"]
    cover_h, cover_w = cover_hw(random.in_hw, size)
    return cover_h - size[0] + 1, cover_w - size[1] + 1


def _drawn_ops(plan: TaskPlan, fast: StaticPath, template: Template, draws: EpochDraws,
               outputs: list[np.ndarray], clip: tuple[int, int, int, int]
               ) -> tuple[OpInstance, ...]:
    """One clip's ops, drawn as `StaticPath.clip` draws them."""
    epoch, video, sample, row = clip
    info = plan.videos[video]
    clip_key = (plan.data_key, epoch, info.name, sample)
    ops = list(template.ops)
    for random, output in zip(template.randoms, outputs, strict=True):
        ops[random.index] = fast.instance(random, int(output[row]), (draws, info, sample),
                                          clip_key)
    return plan.shared(tuple(ops))


def drawn_codes(random: RandomOp, outputs: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """What the op draws from each of these first outputs of its generators, as codes below
    the third value (equal codes: equal draws), and where the draw needs the generator; None
    for an op drawn one clip at a time. Only for an op whose `draw` is the built-in one."""
    op, params = oplib.get_op(random.spec.name), random.spec.param_dict()
    if type(op).draw is RandomCrop.draw:
        spans = _crop_spans(random)
        found = first_integers(outputs, spans)  # y, then x
        if found is None:
            return None
        (y, x), need = found
        return y * spans[1] + x, need, spans[0] * spans[1]
    if type(op).draw is CoinOp.draw:
        none = np.zeros(len(outputs), bool)
        if not 0.0 < params["p"] < 1.0:  # drawn nothing
            return np.zeros(len(outputs), np.int64), none, 1
        return (first_units(outputs) < params["p"]).astype(np.int64), none, 2
    return None
