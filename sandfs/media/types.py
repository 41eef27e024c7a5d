"""What a dataset scan learns about each video (the only facts the planner needs)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING

# the records a scan keeps: read from here by the rest of sandfs
from sandfs.media.framepts import FramePts
from sandfs.media.records import ListedVideo, NamedOnce, VideoFacts, VideoInfo, source_changed

__all__ = ["FramePts", "ListedVideo", "NamedOnce", "VideoFacts", "VideoInfo",
           "source_changed"]  # and below

if TYPE_CHECKING:
    from sandfs.media.probebook import ProbeBook

_LIMIT_ENV = {  # variable -> (field, parser)
    "SANDFS_MAX_PIXELS": ("max_pixels", int),
    "SANDFS_MAX_FILE_BYTES": ("max_file_bytes", int),
    "SANDFS_DECODE_TIMEOUT": ("decode_timeout_seconds", float),
    "SANDFS_MAX_SCAN_FILES": ("max_scan_files", int),
    "SANDFS_MAX_LABELS_BYTES": ("max_labels_bytes", int),
    "SANDFS_MAX_SCANS_PER_OWNER": ("max_scans_per_owner", int),
}


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """Knobs against hostile input: size bombs and files that hang a decoder are rejected
    before or during the scan (docs/testplan.md#tier-media). Env overrides: SANDFS_MAX_PIXELS,
    SANDFS_MAX_FILE_BYTES, SANDFS_DECODE_TIMEOUT, SANDFS_MAX_SCAN_FILES,
    SANDFS_MAX_LABELS_BYTES, SANDFS_MAX_SCANS_PER_OWNER."""

    max_pixels: int = 4096 * 2304  # width * height of the coded picture
    max_file_bytes: int = 8 << 30
    max_frames: int = 200_000
    decode_timeout_seconds: float = 30.0
    max_scan_files: int = 2_000_000  # files a dataset walk lists before it gives up
    max_labels_bytes: int = 64 << 20  # a labels CSV, read whole into memory
    max_scans_per_owner: int = 8  # scans a live mount keeps for one user's tasks

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


PERMISSION_DENIED = "permission_denied"  # the reason of a video its reader may not read
CHANGED = "changed"  # the reason of a file listed from the scan index and found changed since


@dataclass(frozen=True, slots=True)
class BadVideo:
    """A file left out of every epoch, with a reason code (docs/contract.md#status-json) and a human
    detail."""

    rel_path: str
    reason: str  # open_invalid | no_video_stream | not_a_video | not_regular | outside_root |
    #    corrupt_frames | too_large | name_collision | no_frames | decode_timeout |
    #    permission_denied | too_short (task) | changed (since the scan index)
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DatasetScan:
    root: str
    videos: tuple[VideoInfo, ...]  # sorted by name; a lazy scan's: those probed when it returned
    bad: tuple[BadVideo, ...]  # sorted by rel_path; a lazy scan's: as far as known then
    num_probed: int = 0  # files opened and probed by this scan (0: all came from the index)
    # every file that passed the name and stat checks, sorted by name: what plans place in the
    # permutations (None: a scan made by hand, planned from `videos`)
    listed: tuple[ListedVideo, ...] | None = field(default=None, compare=False)
    probes: ProbeBook | None = field(default=None, compare=False)  # the listed files' results
    # `listing_digest` of `listed`, as the scan index recorded it (None: not known)
    digest: str | None = field(default=None, compare=False)


# bump when listing_digest's definition changes: a scan index records the version of the digest
# it stores, and one of another version is not a listing's identity (the index is written
# again); tests/unit/test_indexed_identity.py holds a digest of version 1
IDENTITY_VERSION = 1


def listing_digest(files: Iterable[tuple[str, int]]) -> str:
    """SHA-256 (hex) of the sorted (relative path, size in bytes) of a dataset's files: its
    identity's digest (plan/identity.py). JSON keeps paths with newlines or undecodable bytes
    (surrogate escapes) unambiguous."""
    entries = list(files)
    entries.sort()  # a listing's order by name is nearly this one: a sort of few moves
    return hashlib.sha256(json.dumps(entries).encode("ascii")).hexdigest()


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
DECODING = "decoding"  # ... when every frame was decoded: "decoding: <why>"


@dataclass(frozen=True, slots=True)
class ProbeFacts:
    """What probing one file taught us (everything in VideoInfo that is not about the path)."""

    width: int
    height: int
    num_frames: int
    frame_pts: Sequence[int] = field(repr=False)
    time_base: Fraction | None
    keyframe_indices: tuple[int, ...] = field(repr=False)
    seekable: bool
    rotation: int
    codec: str
    pix_fmt: str
    stream_index: int
    counted_by: str = PACKETS  # or "decoding: <why the packets were not trusted>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame_pts", FramePts.of(self.frame_pts))


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    reason: str
    detail: str
    lasting: bool = True  # False for timeouts and crashes, which depend on the machine's load


ProbeResult = ProbeFacts | ProbeFailure
