"""Ranged decoding: frames by index, RGB exactly as PyAV's `frame.to_ndarray(format="rgb24")`.

Frame INDEX i is the i-th frame the decoder returns from the scanned stream. A seekable video is
decoded in runs: seek to the keyframe at or before a run's first needed frame, decode forward,
identify frames by pts, stop after the run's last needed frame. Within a run the decoder skips
non-reference frames nobody needs (`skips_nonref`). Anything unexpected after a seek falls back
to a sequential decode from the start, which skips nothing: it is the definition of an index.

The scan counts most videos from their packets without decoding them, so a decode also checks
what the scan said. Policy: a requested frame that does not exist (the stream ends early), or
any frame up to the last requested one that fails to decode, is decoded with errors, or has
another size than scanned, raises ScanMismatch. `decode_frames` then returns no frame of
the request; `decode_each` has yielded the frames before the failure, each one checked as it
came (its pts in order, or its place in a sequential decode, whole and of the scanned size), so
the clips made of them are exact and only those needing later frames fail (EIO). A seek run
that meets such a frame falls back to the sequential decode, which decides.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass

import av
import numpy as np
from av.container import InputContainer
from av.video.frame import VideoFrame
from av.video.stream import VideoStream

from sandfs.media.gop import checked_indices as _checked_indices
from sandfs.media.gop import frames_to_decode, plan_runs  # noqa: F401 (importers of decode)
from sandfs.media.opening import describe_error, open_regular_file, open_stream
from sandfs.media.types import FramePts, VideoInfo

log = logging.getLogger(__name__)


class DecodeError(Exception):
    """A video could not be decoded as the scan described it."""

    def __init__(self, video: str, detail: str) -> None:
        super().__init__(f"video {video!r}: {detail}")
        self.video = video
        self.detail = detail


class ScanMismatch(DecodeError):
    """The file does not hold what its scan said: `expected` what the scan promised, `found`
    what decoding met instead."""

    def __init__(self, video: str, path: str, expected: str, found: str) -> None:
        detail = (f"the scan promised {expected}, decoding {path!r} found {found}; the file "
                  f"is damaged or was counted wrongly")
        super().__init__(video, detail)
        self.path = path
        self.expected = expected
        self.found = found


@dataclass(frozen=True, slots=True)
class DecodeResult:
    frames: dict[int, np.ndarray]  # frame index -> HxWx3 uint8 RGB
    frames_decoded: int  # every frame the decoder returned, needed or not (skipped: not decoded)


# Decoders that drop a non-reference picture (H.264 nal_ref_idc 0, HEVC *_N, MPEG-1/2/4 B) when
# skip_frame is NONREF; nothing predicts from one, so a frame nobody needs costs nothing. Each
# checked against a full decode in tests/media/test_skip_nonref.py. Left out: vp9 (FFmpeg's
# decoder ignores NONREF), libdav1d (reads skip_frame only when opened), vp8 (untested).
SKIP_NONREF_DECODERS = frozenset({"h264", "hevc", "mpeg4", "mpeg1video", "mpeg2video"})


def skips_nonref(stream: VideoStream) -> bool:
    """Whether `_decode_run` may let this stream's decoder skip non-reference frames. HEVC only
    with one temporal sub-layer: a sub-layer non-reference picture (TRAIL_N...) may still be a
    reference for a higher sub-layer, and FFmpeg drops it whatever its TemporalId."""
    codec_context = stream.codec_context
    if codec_context.codec.name not in SKIP_NONREF_DECODERS:
        return False
    return codec_context.codec.name != "hevc" or _hvcc_temporal_layers(codec_context.extradata) == 1


def _hvcc_temporal_layers(extradata: bytes | None) -> int | None:
    """numTemporalLayers of an hvcC record (ISO/IEC 14496-15; 0: unknown); None when the
    extradata is no hvcC (Annex B parameter sets start with a start code, not version 1)."""
    if not extradata or len(extradata) < 23 or extradata[0] != 1:
        return None
    return extradata[21] >> 3 & 0b111


def to_rgb(frame: VideoFrame) -> np.ndarray:
    """Equal to `frame.to_ndarray(format="rgb24")`, without its auto-threaded swscale (6x the
    conversion cost on 2 cores)."""
    return np.ascontiguousarray(frame.reformat(format="rgb24", threads=1).to_ndarray())


SWSCALE_INTERPOLATION = {"nearest": "POINT", "bilinear": "BILINEAR", "bicubic": "BICUBIC",
                         "area": "AREA"}
Conversion = tuple[tuple[int, int], str] | None  # ((H, W), interpolation); None: full size


def convert(frame: VideoFrame, conversion: Conversion) -> np.ndarray:
    """RGB at full size (`to_rgb`), or scaled to (H, W) in the same swscale call that converts
    the colours (AVION's fused decode-resize: nearly free next to full-size RGB + a resize)."""
    if conversion is None:
        return to_rgb(frame)
    (height, width), interpolation = conversion
    scaled = frame.reformat(width=width, height=height, format="rgb24",
                            interpolation=SWSCALE_INTERPOLATION[interpolation], threads=1)
    return np.ascontiguousarray(scaled.to_ndarray())


@dataclass(frozen=True, slots=True)
class Unconverted:
    """A decoded frame and the conversion it is wanted in, made when `array` is called."""

    frame: VideoFrame
    conversion: Conversion

    def array(self) -> np.ndarray:
        return convert(self.frame, self.conversion)


def converted(frames: dict[Hashable, object], keys: Iterable[Hashable]) -> dict[Hashable, object]:
    """`frames` with those at `keys` still `Unconverted` converted to RGB (in place); a key
    it lacks stays for the step that reads it to fail on."""
    for key in keys:
        if isinstance(frame := frames.get(key), Unconverted):
            frames[key] = frame.array()
    return frames


def deferred(conversions: Iterable[Conversion]) -> Callable[[VideoFrame], dict]:
    """One decoded frame -> {conversion: Unconverted} for every conversion asked for: each
    converted when it is used (`convert`)."""
    wanted = tuple(dict.fromkeys(conversions))
    return lambda frame: {c: Unconverted(frame, c) for c in wanted}


def decode_frames(info: VideoInfo, indices: Iterable[int],
                  convert_frame: Callable[[VideoFrame], object] = to_rgb) -> DecodeResult:
    """Decodes frames `indices` of a scanned video (ValueError if one is out of range,
    DecodeError if the file fails to open or changed since the scan, ScanMismatch if it holds
    fewer or broken frames than scanned); each needed frame goes through `convert_frame`
    (default: full-size RGB; see `deferred`)."""
    tally = Tally()
    frames = dict(decode_each(info, indices, convert_frame, tally))
    return DecodeResult(frames, tally.frames)


@dataclass(slots=True)
class Tally:
    """Frames decoded so far by a `decode_each` in progress (needed or not)."""

    frames: int = 0


def decode_each(info: VideoInfo, indices: Iterable[int],
                convert_frame: Callable[[VideoFrame], object] = to_rgb,
                tally: Tally | None = None) -> Iterator[tuple[int, object]]:
    """`decode_frames` frame by frame: yields (index, converted frame) in index order as the
    decoder reaches each; `tally` counts the frames decoded as it goes, needed or not (read it
    before using a frame: the pass may be read about before it ends). A frame is yielded only once
    it is known to be on plan (identified by its pts in order, whole, of the scanned size), so a
    caller may use it at once; a failure found later (ScanMismatch) concerns the frames after
    it. After a seek lands off plan, the sequential decode yields only the frames not yielded
    yet."""
    wanted = _checked_indices(info, indices)
    tally = tally if tally is not None else Tally()
    if not wanted:
        return
    done: set[int] = set()
    try:
        if info.seekable:
            if (yield from _decode_seeking(info, wanted, convert_frame, done, tally)):
                return
            log.info("video=%s: a seek landed off plan, decoding sequentially", ascii(info.name))
        yield from _decode_sequential(info, wanted, convert_frame, done, tally)
    except (av.FFmpegError, OSError, ValueError) as error:
        raise DecodeError(info.name, describe_error(error)) from error


@contextmanager
def _open_scanned(info: VideoInfo) -> Iterator[tuple[InputContainer, VideoStream]]:
    with open_regular_file(info.path, info.identity) as file:
        changed = info.changed(os.fstat(file.fileno()))
        if changed:
            raise DecodeError(info.name, changed)
        with av.open(file) as container:
            yield container, open_stream(container, info.stream_index)


def _decode_seeking(info: VideoInfo, wanted: list[int], convert_frame: Callable,
                    done: set[int], tally: Tally,
                    ) -> Generator[tuple[int, object], None, bool]:
    """Decodes run by run, yielding frames on plan; stops early when a seek lands off plan.
    True when every frame wanted was decoded on plan."""
    with _open_scanned(info) as (container, stream):
        for run_number, (start, needed) in enumerate(plan_runs(info, wanted)):
            if run_number or start:  # a fresh container already stands at frame 0
                container.seek(info.frame_pts[start], stream=stream, backward=True)
            if not (yield from _decode_run(container, stream, info, needed, convert_frame,
                                           done, tally)):
                return False
    return True


def _decode_run(container: InputContainer, stream: VideoStream, info: VideoInfo,
                needed: list[int], convert_frame: Callable, done: set[int],
                tally: Tally) -> Generator[tuple[int, object], None, bool]:
    """Decodes forward until needed[-1], yielding the needed frames; False when the frames are
    not the expected sequence (first frame past needed[0], a pts the scan never saw, a frame
    missing that the decoder was not allowed to skip, one out of order), or one is broken
    (`_broken`, a decoder error)."""
    needed_set = set(needed)
    skippable: set[int] = set()
    previous = None
    decoded = _decode_skipping(container, stream, info.frame_pts, needed_set, skippable)
    with closing(decoded):
        try:
            for frame in decoded:
                tally.frames += 1
                index = _index_of_pts(info.frame_pts, frame.pts)
                if index is None or not _on_plan(index, previous, needed[0], skippable):
                    return False
                if _broken(info, frame):
                    return False
                previous = index
                if index in needed_set:
                    done.add(index)
                    yield index, convert_frame(frame)
                if index == needed[-1]:
                    return True
        except av.FFmpegError:
            return False
    return False


def _broken(info: VideoInfo, frame: VideoFrame) -> str | None:
    """What is wrong with a decoded frame (None: nothing the decoder or the scan can tell)."""
    if frame.is_corrupt:
        return "a frame decoded with errors"
    if (frame.width, frame.height) != (info.width, info.height):
        return f"a {frame.width}x{frame.height} frame"
    return None


def _decode_skipping(
    container: InputContainer,
    stream: VideoStream,
    frame_pts: FramePts,
    needed: set[int],
    skippable: set[int],
) -> Iterator[VideoFrame]:
    """`container.decode(stream)` packet by packet: a frame nobody needs goes to the decoder with
    skip_frame NONREF (dropped if it is a non-reference frame) and its index into `skippable`; a
    packet of unknown pts is decoded in full. skip_frame is DEFAULT again once this ends or is
    closed."""
    codec_context = stream.codec_context
    may_skip = skips_nonref(stream)
    try:
        # demux ends with an empty packet, whose decode is decode(None): the drain
        for packet in container.demux(stream):
            if may_skip:
                index = _index_of_pts(frame_pts, packet.pts)
                skip = index is not None and index not in needed
                codec_context.skip_frame = "NONREF" if skip else "DEFAULT"
                if skip:
                    skippable.add(index)
            yield from codec_context.decode(packet)
    finally:
        codec_context.skip_frame = "DEFAULT"  # before any later seek and run


def _on_plan(index: int, previous: int | None, first_needed: int, skippable: set[int]) -> bool:
    """The first frame after a seek may come before the run's first needed frame (an earlier
    keyframe); every later one must be the next index, or follow only frames the decoder was
    allowed to skip."""
    if previous is None:
        return index <= first_needed
    return index > previous and skippable.issuperset(range(previous + 1, index))


def _index_of_pts(frame_pts: FramePts, pts: int | None) -> int | None:
    return None if pts is None else frame_pts.index_of(pts)


def _decode_sequential(info: VideoInfo, wanted: list[int], convert_frame: Callable,
                       done: set[int], tally: Tally) -> Iterator[tuple[int, object]]:
    """Frame i is the i-th frame decoded; every one up to wanted[-1] must exist and be whole.
    Yields the wanted frames not in `done`."""
    needed_set = set(wanted) - done
    expected = f"frame {wanted[-1]} of {info.num_frames} ({info.width}x{info.height})"
    index = -1
    with _open_scanned(info) as (container, stream):
        try:
            for index, frame in enumerate(container.decode(stream)):
                tally.frames += 1
                broken = _broken(info, frame)
                if broken:
                    raise ScanMismatch(info.name, info.path, expected, f"{broken} at {index}")
                if index in needed_set:
                    done.add(index)
                    yield index, convert_frame(frame)
                if index == wanted[-1]:
                    return
        except av.FFmpegError as error:
            found = f"a decoder error after {index + 1} frames ({describe_error(error)})"
            raise ScanMismatch(info.name, info.path, expected, found) from error
    raise ScanMismatch(info.name, info.path, expected, f"only {index + 1} frames")


def decode_all_reference(path: str, stream_index: int | None = None,
                         size_hw: tuple[int, int] | None = None,
                         interpolation: str = "bilinear") -> list[np.ndarray]:
    """The plain, obviously correct path, for tests: every frame of the stream (default: the
    best video stream), decoded sequentially, `to_ndarray(format="rgb24")` — or, with
    `size_hw`, `to_ndarray(width=W, height=H, format="rgb24", interpolation=...)`."""
    scale = {} if size_hw is None else {
        "width": size_hw[1], "height": size_hw[0],
        "interpolation": SWSCALE_INTERPOLATION[interpolation]}
    with av.open(path) as container:
        if stream_index is None:
            stream = container.streams.best("video")
        else:
            stream = container.streams[stream_index]
        return [frame.to_ndarray(format="rgb24", **scale) for frame in container.decode(stream)]
