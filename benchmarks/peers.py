"""The loaders a user would pick instead of sandfs, each behind a torch DataLoader, all making
the batches a sandfs task config describes.

Every peer takes its clips from sandfs's own plan (`TaskPlan.view_plan(epoch, iteration)`: the
videos of the batch, each clip's frame indices, its resize, crop origin and flip), decodes the
frames with its own library and applies the same ops with `sandfs.ops`, so all of them decode
the same frames and make the same batch, in the same order and shape, as the mount serves. Only
the decoding differs:

- `pyav`: PyAV, seek to the keyframe before the first needed frame (from the scan's keyframe
  list), decode single-threaded to the last one, `reformat(rgb24, threads=1)` (sandfs's own
  conversion).
- `decord`: `VideoReader(num_threads=1).get_batch(indices)` (decord indexes at open).
- `torchcodec`: `VideoDecoder(seek_mode="exact", num_ffmpeg_threads=1).get_frames_at(indices)`.
- `spdl`: `spdl.io.demux_video` + `sample_decode_video(indices)` with an rgb24 filter graph
  (SPDL decodes single-threaded by default).
- `torchcodec-resize`, `spdl-resize`: the same, with the task's first op (a resize) done by the
  decoder (torchcodec's `transforms=[Resize]`, a `scale=` filter in SPDL's graph); the crop and
  flip follow on the smaller frames. Their scalers are not OpenCV's, so their batches differ
  from sandfs's by a few levels (`Peer.tolerance`).

A DataLoader item is one video of one batch, `(epoch, iteration, position)`; the batch sampler
yields a view's items in order and `collate` puts the clips in the view's order (streams, then
videos, then samples). Items decode all clips of their video in one call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from sandfs import ops as oplib
from sandfs.config.loader import load_task_configs
from sandfs.media.datasets import scan_all
from sandfs.media.types import MediaLimits, VideoInfo
from sandfs.ops.base import OpInstance
from sandfs.plan.mount import dataset_key, plan_tasks
from sandfs.plan.task import StreamClip, TaskPlan


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a peer's batch may lie from sandfs's, in uint8 levels."""

    max_abs: int
    mean_abs: float


# Same FFmpeg pipeline: equal, but builds differ in IDCT rounding on MPEG-4 part 2 (1 level on
# a few pixels). A wrong frame of the noise-textured synthetic videos is ~40 levels off on
# average (one wrong frame in a 16-frame clip: ~2.5).
EXACT = Tolerance(max_abs=2, mean_abs=0.05)
# swscale's bilinear (in YUV, antialiased by torchcodec) against OpenCV's on RGB, on that noise
# texture: measured 0-12 levels off on average (the most for a 2.8x downscale), single pixels
# far more; a wrong frame is ~40 off.
SCALED = Tolerance(max_abs=255, mean_abs=16.0)


Size = tuple[int, int] | None  # (H, W) the decoder scales to; None: the video's size
Decode = Callable[[VideoInfo, list[int], Size], dict[int, np.ndarray]]  # index -> RGB frame


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    module: str  # what it imports; not installed: the peer is skipped
    decode: Decode
    decoder_resize: bool  # the decoder does the task's first op (a resize)
    tolerance: Tolerance


def task_plans(config_paths: Sequence[Path], k_epochs: int, workers: int) -> dict[str, TaskPlan]:
    """The plans a fresh `sandfs mount --k-epochs K` of these configs serves (same scan, same
    coordination of the tasks), by task name."""
    configs = load_task_configs([str(p) for p in config_paths])
    plans = plan_tasks(configs, scan_all([dataset_key(c) for c in configs], None, workers,
                                          MediaLimits()), k_epochs=k_epochs)
    return {plan.name: plan for plan in plans}


# -- decoding: frame index -> RGB (H, W, 3) uint8 ---------------------------------------------


def decode_pyav(info: VideoInfo, indices: list[int], size: Size) -> dict[int, np.ndarray]:
    import av

    if size is not None:
        raise ValueError("pyav: no decoder resize variant")
    wanted, last = set(indices), max(indices)
    keyframe = max((k for k in info.keyframe_indices if k <= min(indices)), default=0)
    by_pts = info.seekable and bool(info.frame_pts)  # else: decode from the start and count
    pts_index = {pts: i for i, pts in enumerate(info.frame_pts)}
    frames = {}
    with av.open(info.path) as container:
        stream = container.streams[info.stream_index]
        stream.thread_type, stream.codec_context.thread_count = "SLICE", 1
        if by_pts and keyframe:
            container.seek(info.frame_pts[keyframe], backward=True, stream=stream)
        for count, frame in enumerate(container.decode(stream)):
            index = pts_index.get(frame.pts) if by_pts else count
            if index in wanted:
                frames[index] = frame.reformat(format="rgb24", threads=1).to_ndarray()
            if index is not None and index >= last:
                break
    return frames


def decode_decord(info: VideoInfo, indices: list[int], size: Size) -> dict[int, np.ndarray]:
    import decord

    if size is not None:
        raise ValueError("decord: no decoder resize variant")
    reader = decord.VideoReader(info.path, num_threads=1)
    return dict(zip(indices, reader.get_batch(indices).asnumpy(), strict=True))


def decode_torchcodec(info: VideoInfo, indices: list[int], size: Size) -> dict[int, np.ndarray]:
    from torchcodec.decoders import VideoDecoder
    from torchcodec.transforms import Resize

    decoder = VideoDecoder(info.path, stream_index=info.stream_index, seek_mode="exact",
                           num_ffmpeg_threads=1, dimension_order="NHWC",
                           transforms=[Resize(size)] if size else None)
    return dict(zip(indices, decoder.get_frames_at(indices).data.numpy(), strict=True))


def decode_spdl(info: VideoInfo, indices: list[int], size: Size) -> dict[int, np.ndarray]:
    import spdl.io

    scale = f"scale=w={size[1]}:h={size[0]}:flags=bilinear," if size else ""
    packets = spdl.io.demux_video(info.path)
    frames = spdl.io.sample_decode_video(packets, indices,
                                         filter_desc=f"{scale}format=pix_fmts=rgb24")
    return dict(zip(indices, spdl.io.to_numpy(spdl.io.convert_frames(frames)), strict=True))


PEERS = {peer.name: peer for peer in (
    Peer("pyav", "av", decode_pyav, False, EXACT),
    Peer("decord", "decord", decode_decord, False, EXACT),
    Peer("torchcodec", "torchcodec.decoders", decode_torchcodec, False, EXACT),
    Peer("torchcodec-resize", "torchcodec.decoders", decode_torchcodec, True, SCALED),
    Peer("spdl", "spdl.io", decode_spdl, False, EXACT),
    Peer("spdl-resize", "spdl.io", decode_spdl, True, SCALED),
)}


def peer_unavailable(name: str) -> str | None:
    """Why peer `name` cannot run here (its import fails, with the error), or None."""
    try:
        importlib.import_module(PEERS[name].module)
    except Exception as exc:  # a broken native library raises OSError, RuntimeError, ...
        return f"import {PEERS[name].module} failed: {type(exc).__name__}: {exc}"
    return None


def peer_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    package = PEERS[name].module.split(".")[0]
    try:
        return version(package)
    except PackageNotFoundError:
        return None


# -- the Dataset ------------------------------------------------------------------------------


def decoder_resize(clip: StreamClip, info: VideoInfo) -> tuple[Size, tuple[OpInstance, ...]]:
    """(the size the decoder scales to, the ops left after it) for a clip whose first op is a
    bilinear resize."""
    first = clip.ops[0] if clip.ops else None
    params = dict(first.params) if first else {}
    if first is None or first.name != "resize" or params["interpolation"] != "bilinear":
        raise ValueError(f"a decoder-resize peer needs a bilinear resize as the task's first op, "
                         f"not {first}")
    return oplib.get_op("resize").out_hw(params, (info.height, info.width)), clip.ops[1:]


class PlannedClips(Dataset):
    """Item (epoch, iteration, position): the clips of the position-th video of that batch, as
    the plan draws them, decoded by `peer` in one call; (clips (streams, samples, ...), labels
    (streams, samples))."""

    def __init__(self, plan: TaskPlan, peer: Peer) -> None:
        if plan.source is not None:
            raise ValueError(f"task {plan.name}: decode_resize configs are not supported by the "
                             "peers (their decoders scale differently)")
        self.plan, self.peer = plan, peer
        self.streams, self.samples = len(plan.paths), plan.sampling.samples_per_video

    def __len__(self) -> int:
        return len(self.plan.videos)

    def video_clips(self, epoch: int, iteration: int, position: int) -> list[StreamClip]:
        view = self.plan.view_plan(epoch, iteration)
        videos = len(view.clips) // (self.streams * self.samples)
        per_stream = videos * self.samples  # view order: streams, then videos, then samples
        return [view.clips[s * per_stream + position * self.samples + k]
                for s in range(self.streams) for k in range(self.samples)]

    def __getitem__(self, key: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        clips = self.video_clips(*key)
        info = self.plan.videos[clips[0].video_index]
        size, chains = None, [clip.ops for clip in clips]
        if self.peer.decoder_resize:
            size, _ = decoder_resize(clips[0], info)
            chains = [decoder_resize(clip, info)[1] for clip in clips]
        indices = sorted({i for clip in clips for i in clip.frame_indices})
        frames = self.peer.decode(info, indices, size)
        if len(frames) != len(indices):
            raise RuntimeError(f"{self.peer.name}: {info.rel_path}: decoded {len(frames)} of "
                               f"{len(indices)} frames")
        arrays = [np.stack(oplib.apply_chain(ops, [frames[i] for i in clip.frame_indices]))
                  for clip, ops in zip(clips, chains, strict=True)]
        if self.plan.sampling.layout == "NCTHW":
            arrays = [a.transpose(3, 0, 1, 2) for a in arrays]
        label = self.plan.label_index(self.plan.labels[clips[0].video_index])
        shape = (self.streams, self.samples)
        return (np.stack(arrays).reshape(*shape, *arrays[0].shape),
                np.full(shape, -1 if label is None else label))


def collate(items: list[tuple[np.ndarray, np.ndarray]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Items (video order) -> the view's clip order: streams, then videos, then samples."""
    clips = np.stack([clip for clip, _ in items]).swapaxes(0, 1)
    labels = np.stack([label for _, label in items]).swapaxes(0, 1)
    return (torch.from_numpy(np.ascontiguousarray(clips.reshape(-1, *clips.shape[3:]))),
            torch.from_numpy(labels.reshape(-1)))


class PlanBatches(Sampler):
    """One list of item keys per iteration of the current epoch (`set_epoch`, as with
    DistributedSampler)."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan, self.epoch = plan, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.plan.iterations_per_epoch

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        for iteration in range(self.plan.iterations_per_epoch):
            videos = len(self.plan.batch_videos(self.epoch, iteration))
            yield [(self.epoch, iteration, position) for position in range(videos)]


class PeerFeed:
    """One task's batches from a peer's DataLoader, epoch by epoch."""

    def __init__(self, plan: TaskPlan, peer: Peer, workers: int) -> None:
        self.sampler = PlanBatches(plan)
        self.loader = DataLoader(PlannedClips(plan, peer), batch_sampler=self.sampler,
                                 num_workers=workers, persistent_workers=workers > 0,
                                 collate_fn=collate)
        self.frames_decoded = None  # peers do not count (their libraries do not say)

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, list[int]]]:
        self.sampler.set_epoch(epoch)
        for clips, labels in self.loader:
            yield clips.numpy(), labels.tolist()


# -- checking a peer against sandfs ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerCheck:
    peer: str
    task: str
    batches: int
    max_abs_diff: int
    mean_abs_diff: float
    tolerance: Tolerance
    problems: tuple[str, ...]  # one line per batch off tolerance or of another shape

    @property
    def ok(self) -> bool:
        return not self.problems


def check_peer(peer: Peer, plan: TaskPlan, expected: Callable[[int, int], np.ndarray],
               batches: Sequence[tuple[int, int]]) -> PeerCheck:
    """Make `batches` ((epoch, iteration) pairs) with `peer` in this process and compare each
    with `expected(epoch, iteration)` (sandfs's view)."""
    dataset, worst, means, problems = PlannedClips(plan, peer), 0, [], []
    for epoch, iteration in batches:
        keys = [(epoch, iteration, p) for p in range(len(plan.batch_videos(epoch, iteration)))]
        try:
            got = collate([dataset[key] for key in keys])[0].numpy()
        except Exception as exc:  # the peer's library failing on a file is a finding too
            problems.append(f"epoch {epoch} iteration {iteration}: {type(exc).__name__}: {exc}")
            continue
        want = expected(epoch, iteration)
        if got.shape != want.shape or got.dtype != want.dtype:
            problems.append(f"epoch {epoch} iteration {iteration}: {got.dtype}{got.shape}, "
                            f"sandfs {want.dtype}{want.shape}")
            continue
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        worst, mean = max(worst, int(diff.max())), float(diff.mean())
        means.append(mean)
        if diff.max() > peer.tolerance.max_abs or mean > peer.tolerance.mean_abs:
            problems.append(f"epoch {epoch} iteration {iteration}: max {int(diff.max())} mean "
                            f"{mean:.3f} levels off (tolerance {peer.tolerance})")
    return PeerCheck(peer.name, plan.name, len(batches), worst,
                     round(max(means, default=0.0), 4), peer.tolerance, tuple(problems))
