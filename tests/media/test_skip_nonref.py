"""Selective decoding: the decoder skips the non-reference frames nobody needs, and every needed
frame stays byte-identical to a full decode."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest

from sandfs.media import decode, synth
from sandfs.media.decode import (
    decode_all_reference,
    decode_frames,
    frames_to_decode,
    plan_runs,
)
from sandfs.media.opening import open_stream
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import read_painted_index, write_test_video
from sandfs.media.types import VideoInfo

NUM_FRAMES, GOP = 50, 12  # five GOPs: requests span several runs
SKIPPING = {  # file -> encoder arguments: a fixed B-frame pattern, for every decoder on the list
    "h264_b3.mp4": {"codec": "libx264", "bframes": 3, "b_adapt": False},
    "h264_adaptive.mkv": {"codec": "libx264", "bframes": 3},
    "hevc_b3.mp4": {"codec": "libx265", "bframes": 3, "b_adapt": False},  # open GOP (CRA)
    "mpeg4_b2.avi": {"codec": "mpeg4", "bframes": 2},
    "mpeg2_b2.mkv": {"codec": "mpeg2video", "bframes": 2},
    "mpeg1_b2.mkv": {"codec": "mpeg1video", "bframes": 2},
}
NOT_SKIPPING = {
    "h264_no_b.mp4": {"codec": "libx264"},
    "hevc_layers.mkv": {"codec": "libx265", "bframes": 3, "b_adapt": False, "layers": 3},
}


def _write(path: Path, codec: str, layers: int = 1, **kwargs: object) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if layers > 1:  # x265's temporal sub-layers: TSA_N pictures on the top one
            patch.setattr(synth, "_codec_options", _with_x265_layers(layers))
        write_test_video(path, num_frames=NUM_FRAMES, width=64, height=48, gop=GOP,
                         noise=True, codec=codec, **kwargs)  # type: ignore[arg-type]


def _with_x265_layers(layers: int):
    plain = synth._codec_options

    def options(*args: object) -> dict[str, str]:
        found = plain(*args)  # type: ignore[arg-type]
        found["x265-params"] += f":temporal-layers={layers}"
        return found

    return options


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, VideoInfo]:
    root = tmp_path_factory.mktemp("skip_nonref")
    for name, kwargs in {**SKIPPING, **NOT_SKIPPING}.items():
        _write(root / name, **kwargs)  # type: ignore[arg-type]
    scan = scan_dataset(root, ["mp4", "mkv", "avi"])
    assert not scan.bad
    return {video.rel_path: video for video in scan.videos}


def _non_reference(video: VideoInfo) -> set[int]:
    """The frames the decoder drops with skip_frame NONREF throughout."""
    with av.open(video.path) as container:
        stream = open_stream(container, video.stream_index)
        stream.codec_context.skip_frame = "NONREF"
        kept = {video.frame_pts.index(frame.pts) for frame in container.decode(stream)}
    return set(range(video.num_frames)) - kept


def _expected_decoded(video: VideoInfo, indices: list[int], non_reference: set[int]) -> int:
    """Each run decodes from its keyframe to its last needed frame, but the non-reference
    frames nobody needs."""
    return sum(
        1
        for start, needed in plan_runs(video, sorted(set(indices)))
        for index in range(start, needed[-1] + 1)
        if index in needed or index not in non_reference
    )


def _index_sets(num_frames: int, non_reference: set[int], seed: int) -> Iterator[list[int]]:
    rng = random.Random(seed)
    last = num_frames - 1
    skipped = sorted(non_reference)
    after_skipped = [i for i in range(1, num_frames) if i - 1 in non_reference]
    yield from ([0], [last], [rng.randrange(num_frames)], list(range(num_frames)))
    yield from ([0, last], [GOP - 1, GOP, GOP + 1], skipped[:1], skipped[-1:])
    for _ in range(12):
        yield _some(rng, skipped, 6)  # needed non-reference frames
        yield _some(rng, after_skipped, 6)  # right after a skipped frame
        yield _some(rng, range(num_frames), 16)  # several GOPs, several runs
        start = rng.randrange(num_frames)
        yield list(range(start, num_frames, rng.choice((2, 3, 4))))[:8]  # a strided clip


def _some(rng: random.Random, population: Sequence[int], most: int) -> list[int]:
    return rng.sample(population, rng.randint(1, min(most, len(population))))


def _assert_reference_frames(indices: list[int], frames: dict, reference: list) -> None:
    assert sorted(frames) == sorted(set(indices))
    for index, frame in frames.items():
        np.testing.assert_array_equal(frame, reference[index], err_msg=f"frame {index}")


@pytest.mark.parametrize("name", SKIPPING)
def test_needed_frames_equal_a_full_decode_and_nonref_frames_are_skipped(name, videos):
    video = videos[name]
    reference = decode_all_reference(video.path, video.stream_index)
    non_reference = _non_reference(video)
    assert len(non_reference) >= NUM_FRAMES // 3  # a real B-frame pattern to skip in
    decoded = planned = 0
    for indices in _index_sets(video.num_frames, non_reference, seed=len(name)):
        result = decode_frames(video, indices)
        _assert_reference_frames(indices, result.frames, reference)
        assert result.frames_decoded == _expected_decoded(video, indices, non_reference), indices
        decoded += result.frames_decoded
        planned += frames_to_decode(video, indices)
    assert decoded < 0.85 * planned


@pytest.mark.parametrize("name", NOT_SKIPPING)
def test_nothing_is_skipped_without_b_frames_or_with_hevc_sub_layers(name, videos):
    video = videos[name]
    reference = decode_all_reference(video.path, video.stream_index)
    non_reference = _non_reference(video)
    assert bool(non_reference) == ("layers" in NOT_SKIPPING[name])  # TSA_N frames left whole
    for indices in _index_sets(video.num_frames, non_reference or {0}, seed=3):
        result = decode_frames(video, indices)
        _assert_reference_frames(indices, result.frames, reference)
        assert result.frames_decoded == frames_to_decode(video, indices)


def test_a_decoder_off_the_list_never_skips(videos, monkeypatch):
    video = videos["h264_b3.mp4"]
    monkeypatch.setattr(decode, "SKIP_NONREF_DECODERS", frozenset({"hevc"}))
    reference = decode_all_reference(video.path)
    for indices in _index_sets(video.num_frames, _non_reference(video), seed=4):
        result = decode_frames(video, indices)
        _assert_reference_frames(indices, result.frames, reference)
        assert result.frames_decoded == frames_to_decode(video, indices)


def test_hvcc_temporal_layers():
    hvcc = bytearray(23)
    hvcc[0], hvcc[21] = 1, 0b00_011_1_11  # version 1; 3 temporal layers, nested, 4-byte lengths
    assert decode._hvcc_temporal_layers(bytes(hvcc)) == 3
    assert decode._hvcc_temporal_layers(b"\0\0\0\1\x40\x01" + bytes(20)) is None  # Annex B
    assert decode._hvcc_temporal_layers(None) is None


def test_sequential_fallback_skips_nothing(videos):
    video = videos["hevc_b3.mp4"]
    lying = replace(video, frame_pts=tuple(pts + 1 for pts in video.frame_pts))
    result = decode_frames(lying, [30, 31])
    assert [read_painted_index(result.frames[i]) for i in (30, 31)] == [30, 31]
    assert result.frames_decoded == 1 + 32  # one frame off plan, then every frame up to 31


def _tampered(change: str, index: int):
    """_decode_skipping, but frame `index` never comes ("drop") or comes after the next one
    ("swap")."""
    plain = decode._decode_skipping

    def decode_skipping(container, stream, frame_pts, needed, skippable):
        held = None
        for frame in plain(container, stream, frame_pts, needed, skippable):
            if frame.pts != frame_pts[index]:
                yield frame
                if held is not None:
                    yield held
                    held = None
            elif change == "swap":
                held = frame

    return decode_skipping


@pytest.mark.parametrize("change", ["drop", "swap"])
def test_a_needed_frame_missing_or_out_of_order_falls_back(videos, monkeypatch, change):
    video = videos["h264_b3.mp4"]
    monkeypatch.setattr(decode, "_decode_skipping", _tampered(change, 25))
    result = decode_frames(video, [25, 27])
    reference = decode_all_reference(video.path)
    _assert_reference_frames([25, 27], result.frames, reference)
    assert result.frames_decoded > 27 + 1  # the sequential decode ran, skipping nothing


def test_gaps_on_plan_are_frames_let_skip_only():
    on_plan = decode._on_plan
    assert on_plan(3, None, 5, set()) and on_plan(5, None, 5, set())
    assert not on_plan(6, None, 5, {5})  # the first frame past the first needed one
    assert on_plan(4, 3, 0, set()) and on_plan(7, 3, 0, {4, 5, 6})
    assert not on_plan(7, 3, 0, {4, 6})  # frame 5 was not let skip
    assert not on_plan(3, 3, 0, set()) and not on_plan(2, 3, 0, {2})  # repeated, backwards


def test_skip_frame_is_default_again_after_a_run(videos):
    video = videos["h264_b3.mp4"]
    with av.open(video.path) as container:
        stream = open_stream(container, video.stream_index)
        skippable: set[int] = set()
        frames = decode._decode_skipping(container, stream, video.frame_pts, set(), skippable)
        next(frames)
        assert stream.codec_context.skip_frame == "NONREF"  # nothing needed: all may skip
        frames.close()
        assert stream.codec_context.skip_frame == "DEFAULT"
        assert skippable and skippable <= set(range(video.num_frames))
