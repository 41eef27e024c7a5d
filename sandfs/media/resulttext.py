"""A probe result as its scan index row stores it: a JSON text of its own (a usable video's
facts as a list, a failure's as {"bad": {...}}), made in the probe worker that found it and
parsed in the daemon when a plan asks for it (scan_index keeps the rows)."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from dataclasses import asdict
from fractions import Fraction

from sandfs.media.types import FramePts, ProbeFacts, ProbeFailure, ProbeResult

# a usable video's result: these facts as a JSON list (a failure's: {"bad": {...}}); the
# facts named in each of 250,000 entries made the index 100 MB, and its read 1.4 s of the GIL
VIDEO_FIELDS = ("width", "height", "num_frames", "frame_pts", "time_base", "keyframe_indices",
                "seekable", "rotation", "codec", "pix_fmt", "stream_index", "counted_by")


_FACT_FIELDS = tuple(ProbeFacts.__dataclass_fields__)


def result_text(result: ProbeResult) -> str:
    """The result as its row stores it. A probe worker makes a video's with its result: the
    250,000 of a cold scan took 1.3 s of the daemon's GIL as the index was saved."""
    if isinstance(result, ProbeFailure):
        return json.dumps({"bad": asdict(result)}, separators=(",", ":"))
    # not asdict: it deep-copied every pts (250,000 videos: 13 s of CPU with the runs)
    facts = {name: getattr(result, name) for name in _FACT_FIELDS}
    facts["frame_pts"] = _encode_runs(result.frame_pts)
    facts["keyframe_indices"] = _encode_runs(result.keyframe_indices)
    facts["time_base"] = None if result.time_base is None else str(result.time_base)
    return json.dumps([facts[name] for name in VIDEO_FIELDS], separators=(",", ":"))


def result_from_text(text: str) -> ProbeResult:
    """A row's result (ValueError, KeyError, TypeError... for a damaged one)."""
    document = json.loads(text)
    if isinstance(document, dict):
        bad = document["bad"]
        return ProbeFailure(str(bad["reason"]), str(bad["detail"]))
    if len(document) != len(VIDEO_FIELDS):
        raise ValueError(f"{len(document)} facts, not {len(VIDEO_FIELDS)}")
    facts = dict(zip(VIDEO_FIELDS, document, strict=True))
    time_base = facts["time_base"]
    probe = ProbeFacts(
        width=int(facts["width"]),
        height=int(facts["height"]),
        num_frames=int(facts["num_frames"]),
        frame_pts=_frame_pts(facts["frame_pts"]),
        time_base=None if time_base is None else _fraction(str(time_base)),
        keyframe_indices=_decode_runs(facts["keyframe_indices"]),
        seekable=bool(facts["seekable"]),
        rotation=int(facts["rotation"]),
        codec=str(facts["codec"]),
        pix_fmt=str(facts["pix_fmt"]),
        stream_index=int(facts["stream_index"]),
        counted_by=str(facts["counted_by"]),
    )
    if not _consistent(probe):
        raise ValueError(f"inconsistent entry: {probe}")
    return probe


@functools.lru_cache(maxsize=64)
def _fraction(text: str) -> Fraction:
    """A time base: a dataset's videos share a few."""
    return Fraction(text)


def _consistent(facts: ProbeFacts) -> bool:
    """What decoding relies on: one pts per frame (or none), keyframes within range."""
    pts_ok = len(facts.frame_pts) in (0, facts.num_frames) and (
        facts.frame_pts or not facts.seekable
    )
    keyframes = facts.keyframe_indices
    return facts.num_frames > 0 and pts_ok and (
        not keyframes or 0 <= min(keyframes) <= max(keyframes) < facts.num_frames)


def _encode_runs(values: tuple[int, ...]) -> list[int]:
    """[first, step, count, step, count, ...]: a constant-rate video's pts fit in 3 numbers."""
    if not values:
        return []
    if isinstance(values, FramePts) and (run := values.one_run()) is not None:
        first, step, count = run  # most videos: no walk over every pts
        return [first] if count == 1 else [first, step, count - 1]
    encoded = [values[0]]
    for step in _steps(values):
        if len(encoded) > 1 and encoded[-2] == step:
            encoded[-1] += 1
        else:
            encoded += [step, 1]
    return encoded


def _steps(values: tuple[int, ...]) -> Iterator[int]:
    return (b - a for a, b in itertools.pairwise(values))


def _frame_pts(encoded: list[int]) -> FramePts:
    """The pts of the runs `_encode_runs` wrote; one constant step (most videos) without
    listing every pts: loading 100,000 entries took 6.2 s of CPU, 3.9 s of it here."""
    if len(encoded) == 3:
        first, step, count = (int(number) for number in encoded)
        return FramePts(runs=((first, step, count + 1),))  # as FramePts.of makes it
    return FramePts.of(_decode_runs(encoded))


def _decode_runs(encoded: list[int]) -> tuple[int, ...]:
    if not encoded:
        return ()
    values = [int(encoded[0])]
    for position in range(1, len(encoded), 2):
        step, count, last = int(encoded[position]), int(encoded[position + 1]), values[-1]
        values.extend(last + step * k for k in range(1, count + 1))
    return tuple(values)
