"""Probing one video file: frame count, timestamps and keyframes from an MP4/MOV's sample tables
where they say enough (`mp4box`, no decoder), else from its demuxed packets where those can be
trusted, else by decoding every frame (the fallback, per file).

Counting packets reads the file without decoding it; only the first frame is decoded (its size,
pixel format and rotation, and a check that the decoder starts where the packets say). A frame's
INDEX stays what it always was, the i-th frame the decoder returns: presentation order, which is
the packets' pts sorted. Measured against full decodes (tests/media/test_scan_demux.py keeps the
measurement as a test), frame counts, every pts and every keyframe position agree for:
  codecs h264 (B-frames, b-pyramid), hevc (B-frames), vp9, av1, mpeg4, mpeg1/2video, mjpeg;
  containers mp4/mov (edit lists: packets marked discard are no frames), mkv/webm (which
  store no frame count), MPEG-TS/PS (never seekable, see `ProbeFacts.seekable`), AVI without
  frame reordering; variable frame rate; truncated mkv/webm/ts tails (the demuxer drops the
  partial packet: exactly the frames the decoder returns).
Decoded in full instead (the packets cannot be trusted, or nobody measured them):
  raw elementary streams (.h264: no pts); AVI whose codec reorders frames (its pts are in
  decode order, the decoder's come out permuted: measured for H.264, so left out for all);
  a packet without pts (matroska gives negative timestamps none) or repeated pts; a packet
  flagged corrupt (a truncated mp4 tail); a first packet that is no keyframe or a first frame
  that is not the earliest pts (the decoder would drop leading frames); MPEG-TS/PS whose dts
  go backwards (concatenated or wrapped: sorting pts would mix the parts); and any codec or
  container not listed above (vp8, theora, flv, ogg, ...).
Both ways reject an mp4 whose index lists more packets than the file holds (truncated).
What packets cannot show is damage inside a frame: such a file scans as usable, and the first
decode that meets the damage raises decode.ScanMismatch (EIO for the views that need it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

import av
from av.container import InputContainer
from av.stream import Disposition
from av.video.stream import VideoStream

from sandfs.media.mp4box import NotPlain, sample_table_facts
from sandfs.media.opening import (
    FileReplacedError,
    NotRegularFileError,
    describe_error,
    open_regular_file,
    open_stream,
)
from sandfs.media.types import (
    DECODING,
    PERMISSION_DENIED,
    MediaLimits,
    ProbeFacts,
    ProbeFailure,
    ProbeResult,
)

_AVFMT_NOTIMESTAMPS = 0x80  # raw elementary streams (.h264): no pts, no seeking by pts
# MPEG-TS / MPEG-PS: no index, timestamps may jump; a seek lands off plan for almost every
# request (measured), so those are decoded from the start instead of seeking and falling back
_AVFMT_TS_DISCONT = 0x200
# measured (see the module docstring); anything else is counted by decoding
TRUSTED_CODECS = frozenset(
    {"h264", "hevc", "vp9", "av1", "mpeg4", "mpeg1video", "mpeg2video", "mjpeg"}
)
TRUSTED_CONTAINERS = frozenset(
    {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "mpegts", "mpeg", "avi"}
)
# files whose sample tables are read first (`mp4box`): the rest is opened by FFmpeg at once
SAMPLE_TABLE_SUFFIXES = (".mp4", ".mov", ".m4v")
# Demuxers of pictures, whatever the file is named (FFmpeg probes the content): a PNG, JPEG or
# GIF named .mp4 would otherwise be served as a one-frame (or animated) video
IMAGE_FORMATS = frozenset({"image2", "gif", "apng", "webp", "ico", "tiff"})
# codecs of still pictures: one frame of them in any container is a picture, not a video
STILL_CODECS = frozenset({"png", "bmp", "gif", "tiff", "webp", "jpeg2000", "jpegls", "qoi",
                          "ppm", "pgm", "pbm", "pam", "sgi", "targa", "dpx", "exr"})


def probe_video(
    path: str, limits: MediaLimits, identity: tuple[int, int] | None = None
) -> ProbeResult:
    """Probes one file, choosing its video stream. `identity` (st_dev, st_ino) from the stat
    check must still match at every open: a file swapped meanwhile is refused."""
    try:
        if path.lower().endswith(SAMPLE_TABLE_SUFFIXES):
            facts = _from_sample_tables(path, identity, limits)
            if facts is not None:
                return facts
        with _open_checked(path, identity) as container:
            order = _image_refusal(container) or _stream_order(container)
            if isinstance(order, ProbeFailure):
                return order
            result = _probe_stream(container, order[0], limits)  # one open when trusted
        if isinstance(result, str):
            result = _decode_stream(path, identity, order[0], limits, result)
        if isinstance(result, ProbeFailure) or result.num_frames > 1:
            return result
        for stream_index in order[1:]:  # the best stream is a still image: find a moving one
            with _open_checked(path, identity) as container:
                other = _probe_stream(container, stream_index, limits)
            if isinstance(other, str):
                other = _decode_stream(path, identity, stream_index, limits, other)
            if isinstance(other, ProbeFacts) and other.num_frames > 1:
                return other
        if result.codec in STILL_CODECS:
            return ProbeFailure("not_a_video", f"a still {result.codec} picture, not a video")
        return result
    except FileReplacedError:
        return ProbeFailure("open_invalid", "file replaced during the scan")
    except NotRegularFileError as error:
        return ProbeFailure("not_regular", str(error))
    except MemoryError:
        return ProbeFailure("too_large", "out of memory while decoding")
    except PermissionError as error:  # a daemon that is not root reads as its own user
        return ProbeFailure(PERMISSION_DENIED, f"the daemon's user (uid {os.geteuid()}) cannot "
                            f"read it ({describe_error(error)})")
    except (av.FFmpegError, OSError) as error:
        return ProbeFailure("open_invalid", describe_error(error))


def _from_sample_tables(path: str, identity: tuple[int, int] | None,
                        limits: MediaLimits) -> ProbeFacts | None:
    """The facts an MP4/MOV's sample tables give without a decoder (`mp4box`); None where
    they do not say enough (then the packets are counted)."""
    with open_regular_file(path, identity) as file:
        try:
            return sample_table_facts(file, limits)
        except NotPlain:
            return None


@contextlib.contextmanager
def _open_checked(path: str, identity: tuple[int, int] | None) -> Iterator[InputContainer]:
    with open_regular_file(path, identity) as file:
        # FFmpeg reading the checked descriptor's file itself: no Python read callbacks. (The
        # opening's own decoding is left alone: options that make avformat_find_stream_info
        # skip frames were measured to lose the display matrix, i.e. the rotation.)
        by_descriptor = f"/proc/self/fd/{file.fileno()}"
        source = by_descriptor if os.path.exists(by_descriptor) else file
        with av.open(source) as container:
            yield container


def _image_refusal(container: InputContainer) -> ProbeFailure | None:
    name = container.format.name
    if name in IMAGE_FORMATS or name.endswith("_pipe"):  # png_pipe, jpeg_pipe, webp_pipe, ...
        return ProbeFailure("not_a_video", f"an image ({name}), not a video")
    return None


def _stream_order(container: InputContainer) -> list[int] | ProbeFailure:
    """Video streams to try, best first; cover art (attached_pic) never counts."""
    streams = [s for s in container.streams.video if not s.disposition & Disposition.attached_pic]
    if not streams:
        kinds = sorted({s.type for s in container.streams}) or ["no streams"]
        return ProbeFailure("no_video_stream", f"no video stream ({', '.join(kinds)})")
    best = container.streams.best("video")
    streams.sort(key=lambda s: (s is not best, s.index))
    return [s.index for s in streams]


def _probe_stream(
    container: InputContainer, stream_index: int, limits: MediaLimits
) -> ProbeResult | str:
    """Facts from packets of a freshly opened container; a str says why they cannot be
    trusted (then `_decode_stream`)."""
    stream = open_stream(container, stream_index)
    failure = _check_coded_size(stream, limits)
    if failure:
        return failure
    return _untrusted_kind(container, stream) or _count_packets(container, stream, limits)


def _decode_stream(
    path: str, identity: tuple[int, int] | None, stream_index: int, limits: MediaLimits,
    distrust: str,
) -> ProbeResult:
    with _open_checked(path, identity) as container:
        return _count_frames(container, stream_index, limits, f"{DECODING}: {distrust}")


def _check_coded_size(stream: VideoStream, limits: MediaLimits) -> ProbeFailure | None:
    codec_context = stream.codec_context
    width = max(codec_context.width, codec_context.coded_width)
    height = max(codec_context.height, codec_context.coded_height)
    return _too_many_pixels(width, height, limits) if width * height > limits.max_pixels else None


def _too_many_pixels(width: int, height: int, limits: MediaLimits) -> ProbeFailure:
    detail = f"{width}x{height} = {width * height} pixels > max_pixels {limits.max_pixels}"
    return ProbeFailure("too_large", detail)


def _untrusted_kind(container: InputContainer, stream: VideoStream) -> str | None:
    """Why this container/codec's packets are not counted (None: they are)."""
    codec = stream.codec_context.codec.canonical_name
    format_name = container.format.name
    if container.format.flags & _AVFMT_NOTIMESTAMPS:
        return f"{format_name} has no timestamps"
    if codec not in TRUSTED_CODECS:
        return f"codec {codec} not measured"
    if format_name not in TRUSTED_CONTAINERS:
        return f"container {format_name} not measured"
    if format_name == "avi" and stream.codec_context.has_b_frames:
        return "AVI with frame reordering: its pts are in decode order"
    return None


@dataclass(slots=True)
class _PacketTally:
    """The packets of one stream, in decode order, and the first frame the decoder returned."""

    pts: list[int] = field(default_factory=list)  # of packets that are frames (not discarded)
    key_pts: list[int] = field(default_factory=list)
    num_packets: int = 0  # including discarded ones (a container's frame count includes them)
    last_dts: int | None = None
    dts_backwards: bool = False
    first_frame: av.VideoFrame | None = None
    decoder_done: bool = False  # drained: it takes no more packets


def _first_frame(
    tally: _PacketTally, packet: av.Packet, stream: VideoStream
) -> av.VideoFrame | None:
    """The decoder is fed until it returns one frame, no further. A first packet that is a
    visible keyframe is drained out at once (not held back for reordering: half the cost)."""
    codec_context = stream.codec_context
    frames = codec_context.decode(packet)
    if not frames and not tally.num_packets and packet.is_keyframe and not packet.is_discard:
        frames = codec_context.decode(None)
        tally.decoder_done = True
    return frames[0] if frames else None


def _count_packets(
    container: InputContainer, stream: VideoStream, limits: MediaLimits
) -> ProbeResult | str:
    """Facts from packets; a str says why they cannot be trusted (then decode instead)."""
    tally = _PacketTally()
    try:
        for packet in container.demux(stream):
            distrust = _add_packet(tally, packet, stream)
            if distrust:
                return distrust
            if len(tally.pts) > limits.max_frames:
                detail = f"more than max_frames ({limits.max_frames}) frames"
                return ProbeFailure("too_large", detail)
    except av.FFmpegError as error:
        return f"demuxing failed: {describe_error(error)}"
    if stream.frames and tally.num_packets < stream.frames:  # the container's index promised more
        detail = f"container indexes {stream.frames} packets, the file holds {tally.num_packets}"
        return ProbeFailure("corrupt_frames", f"truncated: {detail}")
    return _facts_from_packets(container, stream, tally, limits)


def _add_packet(tally: _PacketTally, packet: av.Packet, stream: VideoStream) -> str | None:
    """Tallies one packet; a str says why the packets cannot be trusted."""
    if tally.first_frame is None and not tally.decoder_done:
        try:
            tally.first_frame = _first_frame(tally, packet, stream)
        except av.FFmpegError as error:
            return f"first frame does not decode: {describe_error(error)}"
    if not packet.size:  # the empty packet that ends demuxing (it drained the decoder above)
        return None
    tally.num_packets += 1
    if tally.num_packets == 1 and not packet.is_keyframe:
        return "the first packet is no keyframe"
    if packet.dts is not None:
        tally.dts_backwards |= tally.last_dts is not None and packet.dts <= tally.last_dts
        tally.last_dts = packet.dts
    if packet.is_discard:  # an edit list hides it: decoded as a reference, never returned
        return None
    if packet.pts is None:
        return "a packet without pts"
    if packet.is_corrupt:
        return "a packet flagged corrupt"
    tally.pts.append(packet.pts)
    if packet.is_keyframe:
        tally.key_pts.append(packet.pts)
    return None


def _facts_from_packets(
    container: InputContainer, stream: VideoStream, tally: _PacketTally, limits: MediaLimits
) -> ProbeResult | str:
    frame_pts = sorted(tally.pts)
    first = tally.first_frame
    if first is None or not frame_pts:
        return "no frame decoded from the packets"
    if len(set(frame_pts)) < len(frame_pts):
        return "repeated pts"
    if first.pts != frame_pts[0]:
        return f"the first frame decoded has pts {first.pts}, the packets start at {frame_pts[0]}"
    discontinuous = container.format.flags & _AVFMT_TS_DISCONT
    if discontinuous and tally.dts_backwards:
        return "dts go backwards (a timestamp discontinuity)"
    if first.width * first.height > limits.max_pixels:
        return _too_many_pixels(first.width, first.height, limits)
    if first.is_corrupt:
        return ProbeFailure("corrupt_frames", "frame 0 decoded with errors")
    keyframes = tuple(bisect_left(frame_pts, pts) for pts in sorted(tally.key_pts))
    return ProbeFacts(
        width=first.width,
        height=first.height,
        num_frames=len(frame_pts),
        frame_pts=tuple(frame_pts),
        time_base=stream.time_base,
        keyframe_indices=keyframes,
        seekable=not discontinuous,
        rotation=int(first.rotation or 0),
        codec=stream.codec_context.codec.canonical_name,
        pix_fmt=first.format.name,
        stream_index=stream.index,
    )


# ---------------------------------------------------------------------------- the fallback


def _count_frames(
    container: InputContainer, stream_index: int, limits: MediaLimits, counted_by: str
) -> ProbeResult:
    """Decodes every frame of the stream once: the definition of its frames."""
    stream = open_stream(container, stream_index)
    counter = _FrameCounter(limits)
    num_packets = 0
    try:
        for packet in container.demux(stream):
            num_packets += packet.size > 0
            for frame in packet.decode():
                failure = counter.add(frame)
                if failure:
                    return failure
    except av.FFmpegError as error:
        detail = f"decoder error after {counter.num_frames} frames: {describe_error(error)}"
        return ProbeFailure("corrupt_frames", detail)
    if not counter.num_frames:
        return ProbeFailure("no_frames", "the stream decodes to no frames")
    if stream.frames and num_packets < stream.frames:  # the container's index promised more
        detail = f"container indexes {stream.frames} packets, the file holds {num_packets}"
        return ProbeFailure("corrupt_frames", f"truncated: {detail}")
    return counter.facts(container, stream, counted_by)


@dataclass(frozen=True, slots=True)
class _FirstFrame:
    """What the first decoded frame says about every frame (the frame itself is let go)."""

    width: int
    height: int
    pix_fmt: str
    rotation: int


class _FrameCounter:
    """Collects per-frame facts during the probe's decode and rejects what batches can't use."""

    def __init__(self, limits: MediaLimits) -> None:
        self.limits = limits
        self.pts: list[int | None] = []
        self.keyframe_indices: list[int] = []
        self.first: _FirstFrame | None = None

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    def add(self, frame: av.VideoFrame) -> ProbeFailure | None:
        index = self.num_frames
        if self.first is None:
            if frame.width * frame.height > self.limits.max_pixels:
                return _too_many_pixels(frame.width, frame.height, self.limits)
            rotation = int(frame.rotation or 0)
            self.first = _FirstFrame(frame.width, frame.height, frame.format.name, rotation)
        elif (frame.width, frame.height) != (self.first.width, self.first.height):
            size = f"{self.first.width}x{self.first.height} -> {frame.width}x{frame.height}"
            detail = f"frame size changes mid-stream at frame {index}: {size}"
            return ProbeFailure("corrupt_frames", detail)
        if frame.is_corrupt:
            return ProbeFailure("corrupt_frames", f"frame {index} decoded with errors")
        if index >= self.limits.max_frames:
            detail = f"more than max_frames ({self.limits.max_frames}) frames"
            return ProbeFailure("too_large", detail)
        self.pts.append(frame.pts)
        if frame.key_frame:
            self.keyframe_indices.append(index)
        return None

    def facts(self, container: InputContainer, stream: VideoStream, counted_by: str) -> ProbeFacts:
        assert self.first is not None
        frame_pts = tuple(p for p in self.pts if p is not None)
        if len(frame_pts) < self.num_frames:
            frame_pts = ()  # some frames lack pts: index by decode order only
        increasing = all(a < b for a, b in itertools.pairwise(frame_pts))
        seek_off_plan = container.format.flags & (_AVFMT_NOTIMESTAMPS | _AVFMT_TS_DISCONT)
        return ProbeFacts(
            width=self.first.width,
            height=self.first.height,
            num_frames=self.num_frames,
            frame_pts=frame_pts,
            time_base=stream.time_base,
            keyframe_indices=tuple(self.keyframe_indices),
            seekable=bool(frame_pts) and increasing and not seek_off_plan,
            rotation=self.first.rotation,
            codec=stream.codec_context.codec.canonical_name,
            pix_fmt=self.first.pix_fmt,
            stream_index=stream.index,
            counted_by=counted_by,
        )
