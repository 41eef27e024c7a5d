"""The bad-input corpus: one file per class of broken, odd or hostile video, generated at test
time (each builder says how).

`CORPUS` lists every file with the classification the scan must give it: a reason code for a
bad file, None for a usable one (then with the facts the scan must report). Builders that need
an encoder this FFmpeg build lacks are skipped with a reason, never silently dropped.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import av.codec
import numpy as np
from av.stream import Disposition

from sandfs.media.synth import write_test_video
from sandfs.media.types import DatasetScan

EXTENSIONS = ("mp4", "MKV", ".webm", "avi", "h264")  # mixed case and dots on purpose
Builder = Callable[[Path, Path], None]  # (file path, corpus root)
AV1_ENCODER = next(
    (e for e in ("libsvtav1", "libaom-av1", "librav1e") if e in av.codecs_available), "libsvtav1"
)


@dataclass(frozen=True)
class CorpusFile:
    rel_path: str
    reason: str | None  # expected BadVideo.reason; None: a usable video
    build: Builder = field(repr=False)
    encoder: str | None = None  # skip when this FFmpeg build cannot encode it
    num_frames: int = 0
    seekable: bool = True
    rotation: int = 0
    pix_fmt: str = "yuv420p"
    codec: str = "h264"
    stream_index: int = 0
    size: tuple[int, int] = (64, 48)

    @property
    def missing(self) -> str | None:
        """Why this build cannot write the file (None: it can)."""
        if self.encoder is None:
            return None
        if self.encoder not in av.codecs_available:
            return f"encoder {self.encoder} is not in this FFmpeg build"
        formats = av.codec.Codec(self.encoder, "w").video_formats or ()
        if self.pix_fmt not in {f.name for f in formats}:
            return f"encoder {self.encoder} cannot write {self.pix_fmt} in this FFmpeg build"
        return None


def _video(**kwargs: object) -> Builder:
    def build(path: Path, root: Path) -> None:
        write_test_video(path, **kwargs)  # type: ignore[arg-type]

    return build


def _valid(rel_path: str, num_frames: int, *, size=(64, 48), encoder="libx264", **facts_and_kwargs):
    """A usable video written by write_test_video; facts the scan must report ride along."""
    facts = {k: facts_and_kwargs.pop(k) for k in ("seekable", "codec") if k in facts_and_kwargs}
    kwargs = {"num_frames": num_frames, "width": size[0], "height": size[1], **facts_and_kwargs}
    kwargs["codec"] = encoder
    return CorpusFile(
        rel_path,
        None,
        _video(**kwargs),
        encoder=encoder,
        num_frames=num_frames,
        rotation=int(facts_and_kwargs.get("rotation", 0)),
        pix_fmt=str(facts_and_kwargs.get("pix_fmt", "yuv420p")),
        size=size,
        **facts,
    )


# ----------------------------------------------------------------------------- builders


def _write_bytes(data: bytes) -> Builder:
    return lambda path, root: path.write_bytes(data)


def _truncated(fraction: float, **kwargs: object) -> Builder:
    def build(path: Path, root: Path) -> None:
        write_test_video(path, num_frames=60, width=160, height=120, noise=True, **kwargs)  # type: ignore[arg-type]
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)])

    return build


def _mp4_boxes(data: bytes) -> dict[bytes, tuple[int, int]]:
    boxes, offset = {}, 0
    while offset + 8 <= len(data):
        size = int.from_bytes(data[offset : offset + 4], "big")
        boxes[data[offset + 4 : offset + 8]] = (offset, size)
        offset += max(size, 8)
    return boxes


def write_bitflipped(path: Path, root: Path) -> None:
    """100 bit flips in the frame data: only decoding can tell (tests/media/test_scan_demux.py)."""
    write_test_video(path, num_frames=100, width=160, height=120, noise=True)
    data = bytearray(path.read_bytes())
    mdat_offset, mdat_size = _mp4_boxes(bytes(data))[b"mdat"]
    rng = random.Random(1)
    for _ in range(100):
        data[rng.randrange(mdat_offset + 16, mdat_offset + mdat_size)] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def _audio_only(path: Path, root: Path) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=8000)
        for i in range(10):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 8000, i * 1024
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _huge(path: Path, root: Path) -> None:
    """One black 8192x8192 frame: a ~200 kB file that would decode to hundreds of MB."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width = stream.height = 8192
        frame = av.VideoFrame(8192, 8192, "yuv420p")
        for plane in frame.planes:
            np.frombuffer(plane, np.uint8)[:] = 128 if plane is not frame.planes[0] else 16
        frame.pts = 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _nal_units(data: bytes) -> list[bytes]:
    starts = [m.start() for m in re.finditer(b"\x00\x00\x01", data)]
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]


def _no_keyframe(path: Path, root: Path) -> None:
    """A raw H.264 stream with its only IDR picture removed: the decoder returns nothing."""
    write_test_video(path, num_frames=30, width=64, height=48, gop=300)
    idr_type = 5
    units = [u for u in _nal_units(path.read_bytes()) if u[3] & 0x1F != idr_type]
    path.write_bytes(b"".join(units))


def _size_change(path: Path, root: Path) -> None:
    """Two raw H.264 streams of different sizes, concatenated."""
    parts = []
    for size in ((64, 48), (96, 64)):
        part = path.with_name(f"part{size[0]}.tmp.h264")
        write_test_video(part, num_frames=10, width=size[0], height=size[1])
        parts.append(part.read_bytes())
        part.unlink()
    path.write_bytes(b"".join(parts))


def _fifo(path: Path, root: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path, root: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def _symlink(target: str) -> Builder:
    return lambda path, root: path.symlink_to(target)


def _escape(path: Path, root: Path) -> None:
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir(exist_ok=True)
    write_test_video(outside / "target.mp4", num_frames=10, width=64, height=48)
    path.symlink_to(outside / "target.mp4")


def _renamed(ext: str, **kwargs: object) -> Builder:
    """Written as `ext` (the container follows the extension), then renamed."""

    def build(path: Path, root: Path) -> None:
        temp = path.with_name(path.name + ext)
        write_test_video(temp, **kwargs)  # type: ignore[arg-type]
        temp.rename(path)

    return build


def _two_streams(still_disposition: Disposition | None) -> Builder:
    """A 1-frame MJPEG stream (cover art when `still_disposition` says so) before the video."""

    def build(path: Path, root: Path) -> None:
        time_base = Fraction(1, 25)
        painted = path.with_name(path.name + ".src.mp4")
        write_test_video(painted, num_frames=30, width=64, height=48)
        with av.open(str(painted)) as source, av.open(str(path), "w") as container:
            still = container.add_stream("mjpeg", rate=25)
            still.width, still.height, still.pix_fmt = 64, 48, "yuvj420p"
            if still_disposition is not None:
                still.disposition = still_disposition
            video = container.add_stream_from_template(source.streams.video[0])
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 200, np.uint8), format="rgb24")
            frame.pts, frame.time_base = 0, time_base
            container.mux(still.encode(frame))
            container.mux(still.encode(None))
            for packet in source.demux(source.streams.video[0]):
                if packet.size:
                    packet.stream = video
                    container.mux(packet)
        painted.unlink()

    return build


def _picture(container_format: str, codec: str, pix_fmt: str, frames: int = 1) -> Builder:
    """A picture (`frames` > 1: an animated one) written with `codec` in `container_format`,
    whatever the file's name says."""

    def build(path: Path, root: Path) -> None:
        with av.open(str(path), "w", format=container_format) as container:
            stream = container.add_stream(codec, rate=10)
            stream.width, stream.height, stream.pix_fmt = 64, 48, pix_fmt
            for index in range(frames):
                pixels = np.full((48, 64, 3), 40 + 50 * index, np.uint8)
                frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(
                    format=pix_fmt)
                frame.pts = index
                container.mux(stream.encode(frame))
            container.mux(stream.encode(None))

    return build


# ----------------------------------------------------------------------------- the corpus

CORPUS: tuple[CorpusFile, ...] = (
    # not decodable at open
    CorpusFile("bad/zero_length.mp4", "open_invalid", _write_bytes(b"")),
    CorpusFile("bad/text_as.mp4", "open_invalid", _write_bytes(b"not a video, just text\n" * 20)),
    CorpusFile(
        "bad/random_bytes.mp4", "open_invalid", _write_bytes(random.Random(2).randbytes(5000))
    ),
    CorpusFile("bad/trunc_no_moov.mp4", "open_invalid", _truncated(0.5)),
    CorpusFile("bad/dangling.mp4", "open_invalid", _symlink("no-such-target.mp4")),
    # no video stream, no frames
    CorpusFile("bad/audio_only.mp4", "no_video_stream", _audio_only),
    CorpusFile("bad/no_keyframe.h264", "no_frames", _no_keyframe),
    # pictures named as videos: not one-frame videos
    CorpusFile("bad/png_as.mp4", "not_a_video", _picture("image2pipe", "png", "rgb24")),
    CorpusFile("bad/jpeg_as.mp4", "not_a_video", _picture("image2pipe", "mjpeg", "yuvj420p")),
    CorpusFile("bad/gif_as.mp4", "not_a_video", _picture("gif", "gif", "rgb8")),
    CorpusFile("bad/animated_gif_as.mp4", "not_a_video", _picture("gif", "gif", "rgb8", 3)),
    CorpusFile("bad/png_in.mp4", "not_a_video", _picture("mp4", "png", "rgb24")),
    # special files: refused without opening
    CorpusFile("bad/fifo.mp4", "not_regular", _fifo),
    CorpusFile("bad/socket.mp4", "not_regular", _socket),
    CorpusFile("bad/devzero.mp4", "not_regular", _symlink("/dev/zero")),
    CorpusFile("bad/escape.mp4", "outside_root", _escape),
    # mid-stream corruption
    CorpusFile(
        "bad/trunc_mdat.mp4",
        "corrupt_frames",
        _truncated(0.6, container_options={"movflags": "faststart"}),
    ),
    CorpusFile("bad/size_change.h264", "corrupt_frames", _size_change),
    # size bomb
    CorpusFile("bad/huge_8192x8192.mp4", "too_large", _huge),
    # names: a newline must not forge a log line
    CorpusFile("names/forge\nvideo=x reason=ok.mp4", "open_invalid", _write_bytes(b"text\n")),
    # collisions: the later file in sorted order loses ("a.MKV" < "a.mp4")
    CorpusFile(
        "collide/a.MKV", None, _renamed(".mkv", num_frames=10, width=64, height=48), num_frames=10
    ),
    CorpusFile("collide/a.mp4", "name_collision", _video(num_frames=10, width=64, height=48)),
    CorpusFile("collide/b.mp4", None, _video(num_frames=10, width=64, height=48), num_frames=10),
    CorpusFile("collide/b/c.mp4", "name_collision", _video(num_frames=10, width=64, height=48)),
    # odd but valid
    _valid("valid/plain.mp4", 40),
    _valid("valid/gop12_noise.mp4", 120, size=(160, 120), noise=True),
    _valid("valid/odd_321x241.mp4", 12, size=(321, 241), pix_fmt="yuv444p"),
    _valid("valid/h264_10bit.mp4", 20, pix_fmt="yuv420p10le"),
    _valid("valid/portrait_64x96.mp4", 12, size=(64, 96)),
    _valid("valid/vp9.webm", 30, encoder="libvpx-vp9", codec="vp9"),
    _valid("valid/av1.mp4", 30, size=(64, 64), encoder=AV1_ENCODER, codec="av1"),
    _valid("valid/hevc.mp4", 30, encoder="libx265", codec="hevc"),
    _valid("valid/mpeg4.avi", 30, encoder="mpeg4", codec="mpeg4"),
    _valid("valid/mjpeg_yuvj.mkv", 20, encoder="mjpeg", pix_fmt="yuvj420p", codec="mjpeg"),
    _valid("valid/vfr.mp4", 40, vfr=True),
    _valid("valid/start_pts.mp4", 30, start_pts=50),
    _valid("valid/rotate90.mp4", 20, rotation=90),
    _valid("valid/bframes.mp4", 40, bframes=3),
    _valid("valid/gop300.mp4", 320, gop=300),
    _valid("valid/h264.mkv", 30),
    _valid("valid/raw.h264", 40, seekable=False),
    _valid("valid/short5.mp4", 5),
    CorpusFile(
        "valid/mkv_named.mp4",
        None,
        _renamed(".mkv", num_frames=20, width=64, height=48),
        num_frames=20,
    ),
    CorpusFile("valid/still_first.mp4", None, _two_streams(None), num_frames=30, stream_index=1),
    CorpusFile(
        "valid/cover_art.mp4", None, _two_streams(Disposition.attached_pic), num_frames=30
    ),  # mp4 moves cover art last
    CorpusFile("valid/link_inside.mp4", None, _symlink("plain.mp4"), num_frames=40),
    _valid("names/new\nline.mp4", 10),
    _valid("names/-leading-dash.mp4", 10),
    _valid("names/vidéo ünïcode.mp4", 10),
    _valid("UPPER.MP4", 10),
)

# never listed, never reported: hidden files and folders, other extensions, symlinked folders
IGNORED = (
    ".hidden.mp4",
    "._resource.mp4",
    ".cache/x.mp4",
    "valid/.partial.mp4",
    "notes.txt",
    "linked",
)


def _build_ignored(root: Path) -> None:
    for rel_path in IGNORED[:4]:
        (root / rel_path).parent.mkdir(parents=True, exist_ok=True)
        write_test_video(root / rel_path, num_frames=5, width=64, height=48)
    (root / "notes.txt").write_text("not a video\n")
    (root / "linked").symlink_to(root / "valid", target_is_directory=True)


@dataclass(frozen=True)
class Corpus:
    root: Path
    files: dict[str, CorpusFile]  # rel_path -> file, only those this build could write


@dataclass(frozen=True)
class CorpusScan:
    scan: DatasetScan
    index_path: Path
    elapsed_seconds: float
    records: list[logging.LogRecord]


def build_corpus(root: Path) -> list[CorpusFile]:
    """Writes every available corpus file under `root`; returns those written."""
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner per encoder otherwise
    written = []
    for item in CORPUS:
        if item.missing:
            continue
        path = root / item.rel_path
        path.parent.mkdir(parents=True, exist_ok=True)
        item.build(path, root)
        written.append(item)
    _build_ignored(root)
    return written


def remove_corpus(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(root.parent / f"{root.name}-outside", ignore_errors=True)
