"""A video's frame pts held compactly (sandfs/media/types.py, FramePts): the same numbers as the
tuple they came from, whatever their pattern, in a fraction of its memory."""

from __future__ import annotations

import pickle
import random
import tracemalloc
from fractions import Fraction

import pytest

from sandfs.media.types import FramePts, VideoInfo

PATTERNS = {
    "constant rate": tuple(range(1024, 1024 + 300 * 512, 512)),
    "a rate change": (*range(0, 100 * 3, 3), *range(300, 300 + 50 * 7, 7)),
    "variable rate": tuple(sorted(random.Random(0).sample(range(100_000), 300))),
    "one frame": (42,),
    "none": (),
    "not increasing": (0, 10, 5, 20, 15),
    "repeated": (7, 7, 7, 8),
}


@pytest.mark.parametrize("values", PATTERNS.values(), ids=PATTERNS.keys())
def test_it_is_the_sequence_it_was_made_from(values):
    pts = FramePts.of(values)
    assert len(pts) == len(values) and bool(pts) == bool(values)
    assert list(pts) == list(values) and pts == values and pts == list(values)
    assert [pts[i] for i in range(len(values))] == list(values)
    assert [pts[-i] for i in range(1, len(values) + 1)] == [values[-i] for i in
                                                            range(1, len(values) + 1)]
    assert pts[1:4] == values[1:4]
    with pytest.raises(IndexError):
        pts[len(values)]
    again = pickle.loads(pickle.dumps(pts))
    assert again == pts and hash(again) == hash(pts) and FramePts.of(pts) is pts


@pytest.mark.parametrize("name", ["constant rate", "a rate change", "variable rate", "one frame"])
def test_a_frame_is_found_by_its_pts(name):
    values = PATTERNS[name]
    pts = FramePts.of(values)
    for index, value in enumerate(values):
        assert pts.index_of(value) == index
    assert pts.index_of(values[0] - 1) is None and pts.index_of(values[-1] + 1) is None
    gaps = [v + 1 for v in values if v + 1 not in set(values)]
    assert all(pts.index_of(g) is None for g in gaps[:20])


def test_a_video_keeps_its_pts_compactly():
    """A tuple of 300 pts took 12.5 KB a video with its ints: 2.9 GB for 240k videos."""
    tracemalloc.start()
    videos = [VideoInfo(name=f"c/v{i}", rel_path=f"c/v{i}.mp4", path=f"/d/c/v{i}.mp4",
                        size_bytes=1, mtime_ns=0, width=340, height=256, num_frames=300,
                        frame_pts=tuple(range(i, i + 300 * 512, 512)),
                        time_base=Fraction(1, 12800), keyframe_indices=(0, 250), seekable=True)
              for i in range(2_000)]
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(videos[0].frame_pts, FramePts)
    assert videos[5].timestamp_seconds(2) == float(Fraction(5 + 2 * 512, 12800))
    assert held / len(videos) < 2000  # bytes a video, its names included


def test_a_frames_time_is_its_exact_pts_times_time_base_rounded_once():
    rng = random.Random(0)
    for _ in range(2_000):
        time_base = Fraction(rng.randint(1, 1001), rng.choice([1, 25, 12800, 30000, 90000,
                                                               2**31 - 1]))
        pts = [rng.randint(-2**40, 2**62) for _ in range(3)]
        video = VideoInfo(name="c/v", rel_path="c/v.mp4", path="/d/c/v.mp4", size_bytes=1,
                          mtime_ns=0, width=2, height=2, num_frames=3, frame_pts=tuple(pts),
                          time_base=time_base)
        assert [video.timestamp_seconds(i) for i in range(3)] == [float(p * time_base)
                                                                  for p in pts]
