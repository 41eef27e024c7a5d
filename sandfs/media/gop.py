"""Which frames a ranged decode touches: pure index arithmetic over a scanned video's keyframes
(no decoder here, so planners can count decode work without importing PyAV)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from sandfs.media.types import VideoInfo


def plan_runs(info: VideoInfo, indices: list[int]) -> list[tuple[int, list[int]]]:
    """Groups sorted unique `indices` into runs (start index, needed indices): each run starts
    at the keyframe at or before its first needed frame; a needed frame that lies beyond a later
    keyframe starts a new run (seek there instead of decoding through frames nobody needs)."""
    if not info.seekable:
        return [(0, indices)] if indices else []
    runs: list[tuple[int, list[int]]] = []
    for index in indices:
        start = keyframe_at_or_before(info, index)
        if runs and start <= runs[-1][1][-1] + 1:
            runs[-1][1].append(index)
        else:
            runs.append((start, [index]))
    return runs


def keyframe_at_or_before(info: VideoInfo, index: int) -> int:
    """Where decoding frame `index` starts (0 where the video cannot be seeked)."""
    if not info.seekable:
        return 0
    position = bisect_right(info.keyframe_indices, index)
    return info.keyframe_indices[position - 1] if position else 0


def frames_to_decode(info: VideoInfo, indices: Iterable[int]) -> int:
    """How many frames `decode_frames(info, indices)` decodes when every seek lands as planned
    and the decoder skips nothing: an upper bound, as it skips non-reference frames nobody needs
    (`skips_nonref`)."""
    runs = plan_runs(info, checked_indices(info, indices))
    return sum(needed[-1] - start + 1 for start, needed in runs)


def checked_indices(info: VideoInfo, indices: Iterable[int]) -> list[int]:
    """Sorted unique `indices`; ValueError if one is out of the video's range."""
    wanted = sorted(set(indices))
    if wanted and (wanted[0] < 0 or wanted[-1] >= info.num_frames):
        bad = wanted[0] if wanted[0] < 0 else wanted[-1]
        raise ValueError(f"frame index {bad} out of range [0, {info.num_frames}) of {info.name!r}")
    return wanted
