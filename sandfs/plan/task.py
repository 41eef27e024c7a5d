"""The concrete plan of one task: which videos, clips, frames and augmentation draws make up
every view, as a pure function of (config, usable videos). Nothing here decodes.

Randomness is derived from the task's *data key*: the dataset's identity (identity.py: its tag,
relative paths and sizes, never its location), the dataset section without the path, labels and
shard, and the seed, not the task's name. Tasks with identical pipelines and seeds get identical
views (docs/contract.md#determinism), wherever each reads the data from, and the ranks of a sharded
task (shard.py) share one permutation per epoch and the clips of every video. Clip starts lie on a
frame grid with one random phase per (video, k-epoch window): the shared frame pool of SAND
§5.2, which makes the clips of one window overlap so a video is decoded once per window.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from functools import lru_cache

import numpy as np

from sandfs import ops as oplib
from sandfs.access import owner_of
from sandfs.config.schema import TEST_VIEW_CROP_STEPS, OpSpec, TaskConfig
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, ListedVideo, MediaLimits, VideoInfo
from sandfs.npy import npy_nbytes
from sandfs.ops.base import FrameShape, OpInstance, Window
from sandfs.plan.abstract import stream_paths
from sandfs.plan.clipdraws import ClipDraws, EpochDraws
from sandfs.plan.columns import frame_list, resolve_batches
from sandfs.plan.coordination import Coordination
from sandfs.plan.draws import FirstOutput, NeedGenerator
from sandfs.plan.identity import DatasetIdentity, data_fingerprint
from sandfs.plan.interner import Interner
from sandfs.plan.labels import Labels, match_labels, parse_label_rows, read_labels
from sandfs.plan.listing import top_folder
from sandfs.plan.probed import ProbedVideos, StandIns
from sandfs.plan.records import ClipPath, StreamClip, ViewPlan
from sandfs.plan.seeds import below, clip_rng, derive_seed, rng_for
from sandfs.plan.shard import shard_positions
from sandfs.plan.staticpath import StaticPath
from sandfs.plan.steps import (
    branch_choice,
    branch_label,
    has_temporal_op,
    source_shape,
    static_output,
    step_ops,
)
from sandfs.plan.testviews import clip_start as test_clip_start
from sandfs.plan.testviews import fixed_crop, view_index

PLAN_VERSION = 5  # bump when the same configs plan other views: names of cached objects change


class TaskPlan:
    """Everything planned for one task; view plans are computed on demand and memoized."""

    def __init__(
        self,
        cfg: TaskConfig,
        videos: Sequence[ListedVideo] | Sequence[VideoInfo],
        *,
        k_epochs: int,
        other_rel_paths: Sequence[str] = (),
        coordination: Coordination | None = None,
        identity: DatasetIdentity | None = None,
        refused: Sequence[BadVideo] = (),
        labels_data: bytes | None = None,
        probes: ProbeBook | None = None,
    ) -> None:
        """`videos`: the files the scan listed (sorted by name), each probed in `probes` as it
        comes (None: `videos` are VideoInfo, all usable); `identity`: theirs (None: the
        coordination computes it, once for all the tasks given the same sequence); `refused`:
        the scan's videos left out because the task's owner may not read them; `labels_data`:
        the bytes of its labels CSV, read when it was registered (None: `read_labels` now);
        `other_rel_paths`: the scan's files not in `videos` (their folders are classes too)."""
        self.cfg = cfg
        self.labels_data = labels_data
        self.name = cfg.task
        self.sampling = cfg.dataset.sampling
        self.test_views = self.sampling.test_views  # None: training draws (testviews.py)
        self.k_epochs = k_epochs
        self.paths = stream_paths(cfg)
        self.span_frames = (self.sampling.frames_per_video - 1) * self.sampling.frame_stride + 1
        # what this task shares with the others of the mount, per window (coordination.py)
        self.coordination = coordination or Coordination([cfg])
        self.identity = identity or self.coordination.identity(cfg.dataset.tag, videos)
        self.data_key = derive_seed("data", self.identity.key, data_fingerprint(cfg.dataset),
                                    cfg.seed)
        self.coordination.bind(cfg.task, self.identity)
        self.epoch_offset = self.coordination.epoch_offset(cfg.task)
        # by videos in the batch (a full batch, or an epoch's last): one tuple each, not one
        # a batch (10 bytes a clip), and a size asked at every dispatch
        self.view_shape = lru_cache(maxsize=None)(self._view_shape)
        self._batch_nbytes = lru_cache(maxsize=None)(
            lambda count: npy_nbytes(self.view_shape(count), self.out_dtype))
        self.probes = probes or ProbeBook.of(videos)
        self.listed, skipped = self._usable(videos)  # the permutations' videos
        self.videos = ProbedVideos(self.listed, self.probes)
        self.skipped = (*refused, *skipped)
        self.stand_ins = StandIns(self.name, self.videos)
        # derived from the listing once for every task placing it (listing.py)
        self.listing = self.coordination.listings.of(self.listed)
        self.video_index = self.listing.video_index
        self.positions = shard_positions(len(self.listed), self.sampling.shard,
                                         self.sampling.drop_last)
        self.label_match: Labels | None = None  # a labels CSV: what matched (`_labels`)
        self.labels, self.class_names = self._labels(
            [*other_rel_paths, *(b.rel_path for b in skipped)])
        self.source = self.sampling.decode_resize
        self.source_shape = source_shape(cfg)  # the frames the steps start from, if fixed
        out_shape, self.out_frames = static_output(self.paths[0], self.sampling.frames_per_video,
                                                   source_shape(cfg))
        assert out_shape.height and out_shape.width, "config validation guarantees a fixed size"
        self.out_hw = (out_shape.height, out_shape.width)
        self.out_dtype = out_shape.dtype
        self.shared = Interner()  # one object for equal parts of clips
        self._fixed: dict[tuple[OpSpec, tuple[int, int]], OpInstance] = {}  # `_fixed_instance`
        self._shapes: dict[tuple[OpSpec, FrameShape], FrameShape] = {}  # `_shape_after`
        self.view_plan = lru_cache(maxsize=4096)(self._view_plan)
        self._ahead: dict[tuple[int, int], ViewPlan] = {}  # `resolve_ahead`
        self.epoch_order = lru_cache(maxsize=64)(self._epoch_order)
        self.plan_key = lru_cache(maxsize=256)(self._plan_key)
        self.draws = ClipDraws(self)  # the clips' draws, made for a batch or window at once
        self.static_paths = [StaticPath.of(self, path, stream)
                             for stream, path in enumerate(self.paths)]
        self.temporal = [has_temporal_op(path) for path in self.paths]  # by stream

    def _plan_key(self, window: int) -> int:
        """What the views of a window depend on besides (epoch, iteration): the task's data and
        seed, its shard, and what it shares with other tasks in that window. Names cached
        objects. Keep `sharing_key` in step."""
        if self.test_views:  # evaluation views depend on neither the window nor other tasks
            return derive_seed("plan", PLAN_VERSION, self.data_key, self.sampling.shard,
                               "test_views")
        pool = self.coordination.pool(self.cfg, window)
        crops = sorted(self.coordination.crop_windows(self.cfg, window).items(), key=repr)
        return derive_seed("plan", PLAN_VERSION, self.data_key, self.sampling.shard,
                           self.epoch_offset, pool.key, pool.grid, pool.width_frames,
                           pool.span_frames, crops)

    @property
    def sharing_key(self) -> tuple:
        """Tasks of one mount with equal sharing keys have equal `plan_key`s in every window
        (the shared draws of a window are the same for all tasks on one dataset), hence the
        same views: what the FUSE layer gives one inode. Keep in step with `_plan_key`."""
        return (self.data_key, self.sampling.shard, bool(self.test_views), self.epoch_offset,
                self.k_epochs)

    def window_of(self, epoch: int) -> int:
        """The k-epoch window (counted in mount epochs) that plans this task's `epoch`."""
        return (epoch + self.epoch_offset) // self.k_epochs

    def window_epochs(self, window: int) -> range:
        first = window * self.k_epochs - self.epoch_offset
        return range(max(0, first), min(first + self.k_epochs, self.epochs))

    # -- dataset ----------------------------------------------------------------------------

    def _usable(self, videos: Sequence[ListedVideo]) -> tuple[tuple[ListedVideo, ...], tuple]:
        """The videos the permutations place: all listed, or (`short_video: skip`) those not
        probed too short, which waits for every probe (docs/contract.md#lazy-scan)."""
        if self.sampling.short_video != "skip":  # the listing itself: tasks share its facts
            return (videos if isinstance(videos, tuple) else tuple(videos)), ()
        probed = [(v, self.probes.result(v.rel_path)) for v in videos]
        short = {v.rel_path: r.num_frames for v, r in probed
                 if isinstance(r, VideoInfo) and r.num_frames < self.span_frames}
        keep = tuple(v for v in videos if v.rel_path not in short)
        skipped = tuple(
            BadVideo(rel_path, "too_short", f"{frames} frames < clip span "
                     f"{self.span_frames} (task {self.name}, short_video: skip)")
            for rel_path, frames in short.items()
        )
        return keep, skipped

    def _labels(self, others: Sequence[str]) -> tuple[Sequence[str | None], list[str]]:
        """Each placed video's label and the class names; `others`: the scan's files this
        task does not place."""
        mode = self.cfg.dataset.labels
        if mode == "none":
            return (None,) * len(self.videos), []
        if mode == "dirname":
            every = self.listing.folders.union(map(top_folder, others))  # paths may repeat
            return self.listing.top_folders, sorted(c for c in every if c is not None)
        data = self.labels_data
        if data is None:  # planned at mount: the mount's own config, read now
            data = read_labels(mode, owner_of(self.cfg), MediaLimits.from_env().max_labels_bytes)
        self.label_match = match_labels(self.name, parse_label_rows(data, mode), self.listed,
                                        self.listing.names)
        return self.label_match.labels, list(self.label_match.classes)

    def label_index(self, label: str | None) -> int | None:
        if label is None:
            return None
        return self.class_names.index(label) if label in self.class_names else None

    # -- epochs and batches -----------------------------------------------------------------

    @property
    def iterations_per_epoch(self) -> int:
        """The same on every rank of a sharded task (each reads as many videos)."""
        n, per_batch = len(self.positions), self.sampling.videos_per_batch
        return n // per_batch if self.sampling.drop_last else math.ceil(n / per_batch)

    @property
    def epochs(self) -> int:
        return self.cfg.epochs

    def _epoch_order(self, epoch: int) -> np.ndarray:
        """The videos this task reads in `epoch`, in order: its shard's positions of the one
        permutation every rank draws alike."""
        if self.test_views:  # evaluation: every epoch reads the videos in sorted order
            order = np.array(sorted(range(len(self.listed)), key=lambda i: self.listed[i].name),
                             dtype=np.int64)
            return order[self.positions]
        permutation = rng_for(self.data_key, "order", epoch).permutation(len(self.listed))
        return permutation[self.positions].astype(np.int32)  # cached: 4 bytes a video

    def batch_slots(self, epoch: int, iteration: int) -> list[int]:
        """The listed videos the permutation puts in the batch (known without probing)."""
        per_batch = self.sampling.videos_per_batch
        return self.epoch_order(epoch)[iteration * per_batch : (iteration + 1) * per_batch].tolist()

    def batch_videos(self, epoch: int, iteration: int) -> list[int]:
        """The videos the batch holds: each slot's `stand_in`. Waits for their probes
        (planning threads only)."""
        slots = self.batch_slots(epoch, iteration)
        self.videos.want(slots)
        found = self.stand_ins.found[slots]
        if found.min(initial=0) < 0:
            return [self.stand_in(i) for i in slots]
        return found.tolist()

    def found_unusable(self) -> bool:
        """Every video probed already and found bad (a lazy scan may not know yet)."""
        return all(not isinstance(self.videos.known(i), VideoInfo | None)
                   for i in range(len(self.listed)))

    def stand_in(self, index: int) -> int:
        """The video that fills listed video `index`'s slots (`StandIns.of`)."""
        return self.stand_ins.of(index)

    def _view_shape(self, num_videos: int) -> tuple[int, ...]:
        n = num_videos * self.sampling.samples_per_video * len(self.paths)
        h, w = self.out_hw
        if self.sampling.layout == "NCTHW":
            return (n, 3, self.out_frames, h, w)
        return (n, self.out_frames, h, w, 3)

    def view_nbytes(self, epoch: int, iteration: int) -> int:
        """The view file's size."""
        per_batch = self.sampling.videos_per_batch  # a slice's length: no list of its videos
        count = len(self.epoch_order(epoch)[iteration * per_batch : (iteration + 1) * per_batch])
        return self._batch_nbytes(count)

    # -- clips ------------------------------------------------------------------------------

    def clip_frames(self, epoch: int, video_index: int, sample: int,
                    draws: EpochDraws | None = None,
                    info: VideoInfo | None = None) -> tuple[int, ...]:
        """The decoded frames of one clip before temporal ops: `frames_per_video` indices
        `frame_stride` apart from a random start on the window's frame grid (`draws`: the
        epoch's, with this video's made; `info`: the video's, if at hand)."""
        info = info or self.videos[video_index]
        short = info.num_frames < self.span_frames
        return frame_list(self.sampling, info.num_frames,
                          None if short else self.clip_start(epoch, info, sample, draws,
                                                             video_index))

    def clip_start(self, epoch: int, info: VideoInfo, sample: int,
                   draws: EpochDraws | None = None, expected: int = -1) -> int:
        """`expected`: the video's index, if at hand (checked, not looked up by name)."""
        if self.test_views:
            return test_clip_start(view_index(self.test_views, sample).clip,
                                   self.test_views.clips, info.num_frames, self.span_frames)
        index = self.video_index.index_of(info.name, expected)
        draws = draws or self.draws.prepare(epoch, [index])
        return int(draws.starts[index, sample])

    def resolve_clip(self, epoch: int, iteration: int, video_index: int, sample: int,
                     draws: EpochDraws | None = None, info: VideoInfo | None = None):
        """One StreamClip per stream for this (video, sample) in this epoch and iteration
        (`info`: the video's, if at hand: a probe looked up once a clip, not four times)."""
        info = info or self.videos[video_index]
        draws = draws or self.draws.prepare(epoch, [video_index])
        base = self.clip_frames(epoch, video_index, sample, draws, info)
        clip_key = (self.data_key, epoch, info.name, sample)
        row = (draws, video_index, sample)
        return tuple(
            self._resolve_stream(path, stream, clip_key, base, info, epoch, iteration, row)
            for stream, path in enumerate(self.paths)
        )

    def _resolve_stream(self, path, stream, clip_key, base, info, epoch, iteration,
                        row: tuple[EpochDraws, int, int]) -> StreamClip:
        draws, video_index, sample = row
        static = self.source_shape  # what the config alone says (crop contexts)
        shape = static if static.height else FrameShape(info.height, info.width, "uint8")
        fast = self.static_paths[stream]
        if fast is not None:
            template = fast.template(shape, self._fixed_instance, self._shape_after)
            return fast.clip(template, row, clip_key, base, info)
        frames, spatial, depths, branches = list(base), [], [], []
        prefix: tuple = ()
        for ps in path.steps:
            prefix += ((ps.step.name, ps.output_index),)
            unit = (float(draws.units[prefix][video_index, sample])
                    if ps.step.branch_type == "random" else None)
            choice = branch_choice(ps, unit, self.name, epoch, iteration)
            for pos, spec in enumerate(step_ops(ps, choice)):
                op = oplib.get_op(spec.name)
                in_hw = (shape.height, shape.width)
                if self.test_views and spec.name in TEST_VIEW_CROP_STEPS:
                    crop = view_index(self.test_views, sample).crop
                    inst = self.shared(fixed_crop(spec.params, crop, self.test_views.crops,
                                                  in_hw))
                elif op.random:
                    output = int(draws.outputs[prefix, pos][video_index, sample])
                    key = (*clip_key, "op", prefix, pos)
                    inst = self.random_instance(spec, in_hw, static, epoch, info, sample,
                                                 output, key)
                else:
                    inst = self._fixed_instance(spec, in_hw)
                if op.temporal:
                    frames = list(oplib.track_frames([inst], frames))
                else:
                    spatial.append(inst)
                shape = (op.drawn_shape(spec.param_dict(), dict(inst.drawn), shape) if op.random
                         else self._shape_after(op, spec, shape))
                static = self._shape_after(op, spec, static)
            depths.append(len(spatial))
            branches.append((ps.step.name, branch_label(ps, choice)))
        shared = self.shared
        return StreamClip(video_index, sample, stream, shared(tuple(frames)),
                          shared(tuple(spatial)),
                          shared(ClipPath(shared(tuple(depths)), shared(tuple(branches)),
                                          self.source)))

    def random_instance(self, spec: OpSpec, in_hw: tuple[int, int], static: FrameShape,
                         epoch: int, info: VideoInfo, sample: int, output: int,
                         key: tuple) -> OpInstance:
        """A random op drawn from its generator's first output (`FirstOutput`), or from the
        generator itself (`seeds.clip_rng(*key)`, a few us to make) where it draws more."""
        try:
            return self._draw(spec, in_hw, static, epoch, info, sample, FirstOutput(output))
        except NeedGenerator:
            return self._draw(spec, in_hw, static, epoch, info, sample, clip_rng(*key))

    def _draw(self, spec, in_hw, static, epoch, info, sample, rng) -> OpInstance:
        inst = self._shared_crop(spec, in_hw, static, epoch, info, sample, rng)
        return self.shared(inst or oplib.draw_instance(spec.name, spec.params, rng, in_hw))

    def _fixed_instance(self, spec: OpSpec, in_hw: tuple[int, int]) -> OpInstance:
        """An op that draws nothing is the same instance for every clip of a frame size."""
        key = (spec, in_hw)
        inst = self._fixed.get(key)
        if inst is None:
            inst = self._fixed[key] = self.shared(
                oplib.draw_instance(spec.name, spec.params, None, in_hw))
        return inst

    def _shape_after(self, op: oplib.OpType, spec: OpSpec, shape: FrameShape) -> FrameShape:
        """The frame shape after the op: a few shapes in a dataset, asked for every clip."""
        key = (spec, shape)
        after = self._shapes.get(key)
        if after is None:
            after = self._shapes[key] = op.output_shape(spec.param_dict(), shape)
        return after

    def _shared_crop(self, spec: OpSpec, in_hw: tuple[int, int], static: FrameShape, epoch: int,
                     info: VideoInfo, sample: int, own: np.random.Generator):
        """A random_crop inside the window shared with other tasks (None: not shared): the
        window's place is the pool's draw, the crop's place in it is this task's own."""
        found = spec.name == "random_crop" and self.crop_window(spec, in_hw, static, epoch)
        if not found:
            return None
        (window_h, window_w), context = found
        crop_h, crop_w = spec.param_dict()["size"]
        window = self.window_of(epoch)
        pool = self.coordination.pool(self.cfg, window)
        words = pool.words(window, [repr(info.name)])
        draw_y, draw_x = pool.crop_units(words, epoch + self.epoch_offset, np.array([sample]),
                                         context)[0].tolist()
        window_y = below(in_hw[0] - window_h + 1, draw_y)
        window_x = below(in_hw[1] - window_w + 1, draw_x)
        y = window_y + int(own.integers(0, window_h - crop_h + 1))
        x = window_x + int(own.integers(0, window_w - crop_w + 1))
        return OpInstance("random_crop", spec.params, (("x", x), ("y", y)))

    def crop_window(self, spec: OpSpec, in_hw: tuple[int, int], static: FrameShape,
                    epoch: int) -> tuple[tuple[int, int], tuple] | None:
        """The window, shared with other tasks, a random crop's place is drawn in, and its
        context (the dataset and the crop's input as the config says); None: drawn in the
        whole frame (no window, or one it does not fit in, or too small for it)."""
        context = (self.identity.key, (static.height, static.width) if static.height else None)
        window = self.coordination.crop_windows(self.cfg, self.window_of(epoch)).get(context)
        crop_h, crop_w = spec.param_dict()["size"]
        if (window is None or in_hw[0] < window[0] or in_hw[1] < window[1]
                or crop_h > window[0] or crop_w > window[1]):
            return None
        return window, context

    def resolve_view(self, epoch: int, iteration: int) -> ViewPlan:
        """The batch resolved again, not kept (`view_plan` keeps its last 4,096)."""
        return self._view_plan(epoch, iteration)

    def resolve_batches(self, epoch: int, iterations: Sequence[int]
                        ) -> list[ViewPlan | Exception]:
        """These batches resolved again, not kept, their clips rows of one new table; or why
        each that cannot be made fails (columns.py)."""
        return resolve_batches(self, epoch, iterations)

    def resolve_ahead(self, epoch: int, iteration: int) -> None:
        """Resolve the batch before its window is planned (a joining task's lead part, while
        another part holds the planner), kept for `take_ahead` (not in `view_plan`'s cache:
        the window's table holds its clips, a cached copy would be a second)."""
        self._ahead[epoch, iteration] = self._view_plan(epoch, iteration)

    def take_ahead(self, epoch: int, iteration: int) -> ViewPlan | None:
        """The batch as `resolve_ahead` resolved it, once; None if it did not."""
        return self._ahead.pop((epoch, iteration), None)

    def drop_ahead(self, epochs: Container[int]) -> None:
        """Forget the batches of `epochs` resolved ahead: their window is planned for this
        task, and a part that found one planned already (or read by another task) never took
        it."""
        for key in list(self._ahead):  # copied in one call: a joiner's part pops meanwhile
            if key[0] in epochs:
                self._ahead.pop(key, None)

    def _view_plan(self, epoch: int, iteration: int) -> ViewPlan:
        """One batch clip by clip (as columns, `resolve_batches`, one batch costs ~40% more:
        numpy's calls on 8 rows)."""
        videos = self.batch_videos(epoch, iteration)
        draws = self.draws.prepare(epoch, videos)
        infos = self.videos.infos(videos)
        per_clip = [
            self.resolve_clip(epoch, iteration, v, s, draws, info)
            for v, info in zip(videos, infos, strict=True)
            for s in range(self.sampling.samples_per_video)
        ]
        clips = tuple(streams[k] for k in range(len(self.paths)) for streams in per_clip)
        return ViewPlan(self.name, epoch, iteration, clips, self.view_shape(len(videos)),
                        self.out_dtype, self.sampling.layout)

    # -- metadata ---------------------------------------------------------------------------

    def source_hw(self, info: VideoInfo) -> tuple[int, int]:
        """The size of the frames the steps start from, for this video."""
        return self.source[0] if self.source else (info.height, info.width)

    def clip_meta(self, clip: StreamClip) -> dict:
        info = self.videos[clip.video_index]
        label = self.labels[clip.video_index]
        window = oplib.track_chain(
            clip.ops, Window(0.0, 0.0, float(info.width), float(info.height)),
            self.source_hw(info),
        )
        test = {}
        if self.test_views:  # so that scores can be averaged per video
            index = view_index(self.test_views, clip.sample)
            test = {"test_clip": index.clip, "test_crop": index.crop}
        return {
            "video": info.name,
            "label": label,
            "label_index": self.label_index(label),
            "sample": clip.sample,
            "stream": clip.stream,
            "frame_indices": list(clip.frame_indices),
            "timestamps": [info.timestamp_seconds(i) for i in clip.frame_indices],
            "crop": oplib.crop_box(window),
            "flip": window.flipped,
            "rotation": info.rotation,
            "branches": dict(clip.branches),
            **test,
        }

    def view_meta(self, view: ViewPlan) -> dict:
        return {
            "task": view.task,
            "epoch": view.epoch,
            "iteration": view.iteration,
            "shape": list(view.shape),
            "dtype": view.dtype,
            "layout": view.layout,
            "samples": [self.clip_meta(c) for c in view.clips],
        }

