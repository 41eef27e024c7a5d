"""What a dataset scan learns about each video (the only facts the planner needs)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

_LIMIT_ENV = {  # variable -> (field, parser)
    "SANDFS_MAX_PIXELS": ("max_pixels", int),
    "SANDFS_MAX_FILE_BYTES": ("max_file_bytes", int),
    "SANDFS_DECODE_TIMEOUT": ("decode_timeout_seconds", float),
}


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """Knobs against hostile input: size bombs and files that hang a decoder are rejected
    before or during the scan (docs/testplan.md §4.2). Env overrides: SANDFS_MAX_PIXELS,
    SANDFS_MAX_FILE_BYTES, SANDFS_DECODE_TIMEOUT."""

    max_pixels: int = 4096 * 2304  # width * height of the coded picture
    max_file_bytes: int = 8 << 30
    max_frames: int = 200_000
    decode_timeout_seconds: float = 30.0

    @classmethod
    def from_env(
        cls, base: MediaLimits | None = None, environ: Mapping[str, str] = os.environ
    ) -> MediaLimits:
        """`base` (default: the defaults) with the SANDFS_* variables that are set applied."""
        changes: dict[str, int | float] = {}
        for variable, (name, parse) in _LIMIT_ENV.items():
            text = environ.get(variable)
            if text is None:
                continue
            try:
                value = parse(text)
            except ValueError:
                raise ValueError(f"{variable}={text!r}: not a valid {parse.__name__}") from None
            if not value > 0:
                raise ValueError(f"{variable}={text!r}: must be > 0")
            changes[name] = value
        return replace(base or cls(), **changes)


@dataclass(frozen=True, slots=True)
class VideoInfo:
    """A usable video. Frame INDEX i is the i-th frame the decoder returns (presentation order)."""

    name: str  # VIDEO: path relative to the dataset root, without extension, "/" separated
    rel_path: str  # path relative to the dataset root, with extension
    path: str  # absolute path
    size_bytes: int
    mtime_ns: int
    width: int  # decoded frame size (rotation not applied)
    height: int
    num_frames: int  # frames the decoder returns (counted from packets where trusted)
    frame_pts: tuple[int, ...] = field(repr=False)  # pts of frame i (empty when frames lack pts)
    time_base: Fraction | None = None
    keyframe_indices: tuple[int, ...] = field(default=(), repr=False)
    seekable: bool = False  # pts unique and increasing: seek by pts is safe
    rotation: int = 0  # degrees, from the stream's display matrix
    codec: str = ""
    pix_fmt: str = ""
    stream_index: int = 0

    def timestamp_seconds(self, index: int) -> float | None:
        """frame.time of frame `index` (pts * time_base), or None when the stream has no pts."""
        if not self.frame_pts or self.time_base is None:
            return None
        return float(self.frame_pts[index] * self.time_base)


PERMISSION_DENIED = "permission_denied"  # the reason of a video its reader may not read


@dataclass(frozen=True, slots=True)
class BadVideo:
    """A file left out of every epoch, with a reason code (docs/contract.md §11) and a human
    detail."""

    rel_path: str
    reason: str  # open_invalid | no_video_stream | not_a_video | not_regular | outside_root |
    #    corrupt_frames | too_large | name_collision | no_frames | decode_timeout |
    #    permission_denied | too_short (task)
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DatasetScan:
    root: str
    videos: tuple[VideoInfo, ...]  # sorted by name
    bad: tuple[BadVideo, ...]  # sorted by rel_path
    num_probed: int = 0  # files opened and probed by this scan (0: all came from the index)


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """How far a dataset scan is: what a progress bar or a status file shows."""

    videos_scanned: int  # probed or found in the scan index (bad ones included)
    videos_total: int  # files that passed the name and stat checks
    seconds: float  # since the scan started

    @property
    def seconds_left(self) -> float | None:
        """A linear estimate (None until something was scanned)."""
        if not self.videos_scanned or self.seconds <= 0:
            return None
        remaining = self.videos_total - self.videos_scanned
        return self.seconds * remaining / self.videos_scanned


PACKETS = "packets"  # ProbeFacts.counted_by when the packets were trusted


@dataclass(frozen=True, slots=True)
class ProbeFacts:
    """What probing one file taught us (everything in VideoInfo that is not about the path)."""

    width: int
    height: int
    num_frames: int
    frame_pts: tuple[int, ...] = field(repr=False)
    time_base: Fraction | None
    keyframe_indices: tuple[int, ...] = field(repr=False)
    seekable: bool
    rotation: int
    codec: str
    pix_fmt: str
    stream_index: int
    counted_by: str = PACKETS  # or "decoding: <why the packets were not trusted>"


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    reason: str
    detail: str
    lasting: bool = True  # False for timeouts and crashes, which depend on the machine's load


ProbeResult = ProbeFacts | ProbeFailure
