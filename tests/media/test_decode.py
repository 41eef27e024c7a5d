"""Ranged decoding: exactly PyAV's RGB for the requested frames, decoding no more than planned."""

from __future__ import annotations

import contextlib
import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sandfs.media.decode import (
    DecodeError,
    decode_all_reference,
    decode_each,
    decode_frames,
    deferred,
    frames_to_decode,
)
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import make_dataset, paint_index, read_painted_index, write_test_video
from sandfs.media.types import VideoInfo
from tests.helpers.corpus import CORPUS, Corpus, CorpusScan

VALID = [c for c in CORPUS if c.reason is None]


def _video(corpus_scan: CorpusScan, rel_path: str) -> VideoInfo:
    return next(v for v in corpus_scan.scan.videos if v.rel_path == rel_path)


def _random_subsets(num_frames: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    subsets = [[0], [num_frames - 1], list(range(num_frames))]
    for _ in range(4):
        size = rng.randint(1, min(num_frames, 16))
        subsets.append(rng.sample(range(num_frames), size))
    start = rng.randrange(num_frames)  # a clip: a strided run, as the sampler asks
    subsets.append(list(range(start, num_frames, 3))[:8])
    return subsets


@pytest.mark.parametrize("item", VALID, ids=[ascii(c.rel_path) for c in VALID])
def test_decoded_frames_equal_the_reference(item, corpus: Corpus, corpus_scan: CorpusScan):
    if item.missing:
        pytest.skip(item.missing)
    video = _video(corpus_scan, item.rel_path)
    reference = decode_all_reference(video.path, video.stream_index)
    assert len(reference) == video.num_frames
    assert [read_painted_index(frame) for frame in reference] == list(range(video.num_frames))
    for subset in _random_subsets(video.num_frames, seed=len(item.rel_path)):
        result = decode_frames(video, subset)
        assert sorted(result.frames) == sorted(set(subset))
        for index, frame in result.frames.items():
            assert frame.dtype == np.uint8 and frame.shape == (video.height, video.width, 3)
            np.testing.assert_array_equal(frame, reference[index], err_msg=f"frame {index}")
        assert result.frames_decoded <= frames_to_decode(video, subset)  # B-frames: skips


@pytest.mark.parametrize("item", VALID, ids=[ascii(c.rel_path) for c in VALID])
def test_frames_converted_after_the_pass_moved_on_are_the_same(item, corpus_scan: CorpusScan):
    """A pass keeps decoded frames and converts each when a clip uses it: a frame held while
    the decoder goes on (its buffers are its own) converts to the pixels it had."""
    if item.missing:
        pytest.skip(item.missing)
    video = _video(corpus_scan, item.rel_path)
    held = dict(decode_each(video, range(video.num_frames), deferred([None])))
    reference = decode_all_reference(video.path, video.stream_index)
    for index in reversed(range(video.num_frames)):
        np.testing.assert_array_equal(held[index][None].array(), reference[index],
                                      err_msg=f"frame {index}")


def test_selective_decoding_skips_earlier_segments(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/gop12_noise.mp4")  # 120 frames, keyframes every 12
    clip = list(range(100, 108))
    result = decode_frames(video, clip)
    assert result.frames_decoded == frames_to_decode(video, clip) == 108 - 96
    assert [read_painted_index(result.frames[i]) for i in clip] == clip


def test_frames_between_runs_are_skipped_by_seeking(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/gop12_noise.mp4")
    indices = [1, 2, 50, 51, 110]  # runs [0..2], [48..51], [108..110]
    assert frames_to_decode(video, indices) == 3 + 4 + 3
    assert decode_frames(video, indices).frames_decoded == 10


def test_a_run_continues_through_a_keyframe_when_that_costs_nothing(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/gop12_noise.mp4")
    assert frames_to_decode(video, [10, 11, 12, 13]) == 14  # one run from keyframe 0


def test_non_seekable_decodes_from_the_start(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/raw.h264")
    assert not video.seekable and video.frame_pts == ()
    result = decode_frames(video, [25, 20])
    assert result.frames_decoded == frames_to_decode(video, [20, 25]) == 26
    assert [read_painted_index(result.frames[i]) for i in (20, 25)] == [20, 25]


def test_seek_landing_off_plan_falls_back_to_sequential(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/gop12_noise.mp4")
    lying = replace(video, frame_pts=tuple(pts + 1 for pts in video.frame_pts))
    result = decode_frames(lying, [100, 101])
    assert [read_painted_index(result.frames[i]) for i in (100, 101)] == [100, 101]
    assert result.frames_decoded == 1 + 102  # one frame off plan, then sequential from 0


def test_out_of_range_and_empty_requests(corpus_scan: CorpusScan):
    video = _video(corpus_scan, "valid/short5.mp4")
    with pytest.raises(ValueError, match=r"frame index 5 out of range \[0, 5\)"):
        decode_frames(video, [0, 5])
    with pytest.raises(ValueError, match="frame index -1"):
        frames_to_decode(video, [-1])
    assert decode_frames(video, []).frames == {}
    assert decode_frames(video, []).frames_decoded == 0


@pytest.fixture
def scanned_copy(tmp_path: Path) -> VideoInfo:
    root = tmp_path / "data"
    make_dataset(root, classes=1, videos_per_class=1, num_frames=(30, 30))
    return scan_dataset(root, ["mp4"]).videos[0]


def test_changed_file_is_a_decode_error(scanned_copy: VideoInfo):
    write_test_video(scanned_copy.path, num_frames=31, width=64, height=48)
    with pytest.raises(DecodeError, match="file changed since the dataset scan"):
        decode_frames(scanned_copy, [0])


def test_garbage_with_the_same_size_and_mtime_is_a_decode_error(scanned_copy: VideoInfo):
    Path(scanned_copy.path).write_bytes(b"\0" * scanned_copy.size_bytes)
    os.utime(scanned_copy.path, ns=(scanned_copy.mtime_ns, scanned_copy.mtime_ns))
    with pytest.raises(DecodeError) as raised:
        decode_frames(scanned_copy, [3])
    assert raised.value.video == scanned_copy.name


def test_a_symlink_swapped_in_is_refused(scanned_copy: VideoInfo, tmp_path: Path):
    os.replace(scanned_copy.path, tmp_path / "moved.mp4")
    os.symlink(tmp_path / "moved.mp4", scanned_copy.path)
    with pytest.raises(DecodeError, match="Too many levels of symbolic links"):
        decode_frames(scanned_copy, [0])


def test_parallel_decodes_in_threads(corpus_scan: CorpusScan):
    rel_paths = ("valid/gop12_noise.mp4", "valid/bframes.mp4", "valid/gop300.mp4")
    videos = [_video(corpus_scan, p) for p in rel_paths] * 2
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda v: decode_frames(v, range(0, v.num_frames, 5)), videos))
    for result in results:
        assert all(read_painted_index(frame) == i for i, frame in result.frames.items())


# ----------------------------------------------------------------------------- synth


def test_painted_index_survives_noise_and_compression(tmp_path: Path):
    path = tmp_path / "noisy.mp4"
    write_test_video(path, num_frames=3, width=160, height=120, noise=True, crf=40)
    assert [read_painted_index(f) for f in decode_all_reference(str(path))] == [0, 1, 2]
    frame = np.zeros((48, 64, 3), np.uint8)
    paint_index(frame, (1 << 24) - 1)
    assert read_painted_index(frame) == (1 << 24) - 1


def test_paint_index_bounds():
    with pytest.raises(ValueError, match="too small"):
        paint_index(np.zeros((40, 64, 3), np.uint8), 0)
    with pytest.raises(ValueError, match="out of range"):
        paint_index(np.zeros((48, 64, 3), np.uint8), 1 << 24)


def test_make_dataset_is_deterministic(tmp_path: Path):
    first = make_dataset(tmp_path / "a", classes=2, videos_per_class=3, seed=7)
    second = make_dataset(tmp_path / "b", classes=2, videos_per_class=3, seed=7)
    assert first == second == sorted(first)
    for rel_path in first:
        assert (tmp_path / "a" / rel_path).read_bytes() == (tmp_path / "b" / rel_path).read_bytes()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise KeyError("VmRSS")


def test_a_thousand_decodes_do_not_grow_memory(corpus_scan: CorpusScan):
    """Every container is closed (300 decodes without close grew RSS 63 -> 151 MB
    here). After a warm-up, 1000 more ranged decodes of the corpus's valid videos (and of the
    broken ones, which raise) leave RSS within 5%."""
    videos = [v for v in corpus_scan.scan.videos if v.num_frames]
    rng = random.Random(0)

    def decode_some(count: int) -> None:
        for _ in range(count):
            video = rng.choice(videos)
            indices = rng.sample(range(video.num_frames), min(3, video.num_frames))
            with contextlib.suppress(DecodeError):
                decode_frames(video, indices)

    decode_some(200)
    before = rss_kib()
    decode_some(1000)
    assert rss_kib() <= before * 1.05, f"RSS {before} -> {rss_kib()} KiB"


@pytest.mark.parametrize("ext", [".ts", ".mpg"])
def test_mpeg_ts_and_ps_decode_from_the_start_without_a_wasted_seek(tmp_path: Path, ext: str):
    """No index and timestamps that may jump: seeks landed off plan for almost every request,
    so such files are decoded sequentially at once, with the exact frames."""
    codec = "libx264" if ext == ".ts" else "mpeg2video"
    write_test_video(tmp_path / f"v{ext}", num_frames=60, width=64, height=48, gop=12,
                     codec=codec)
    (video,) = scan_dataset(tmp_path, [ext]).videos
    assert not video.seekable
    reference = decode_all_reference(video.path)
    result = decode_frames(video, [30, 41, 50])
    assert result.frames_decoded == 51
    for index, frame in result.frames.items():
        assert np.array_equal(frame, reference[index])
