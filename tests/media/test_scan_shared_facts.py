"""Videos that probe alike share their facts' objects: a cold mount of 250,000 videos held a
copy of each one's frame pts, time base, keyframes, codec, pixel format and frame size,
unpickled from its probe, and of its device number
(docs/performance.md#startup-and-joining-at-scale)."""

from __future__ import annotations

import os
import threading

from sandfs.media import scan as scan_module
from sandfs.media.scan import SHARED_FACTS, scan_dataset, start_lazy_scan
from sandfs.media.synth import write_test_video


def alike_and_other(root) -> None:
    """Three copies of one video (a file each, not links) and one of another length."""
    root.mkdir()
    write_test_video(root / "a.mp4", num_frames=12, width=320, height=288, fps=24, seed=1)
    for name in ("b.mp4", "c.mp4"):
        (root / name).write_bytes((root / "a.mp4").read_bytes())
    write_test_video(root / "d.mp4", num_frames=20, width=320, height=288, fps=24, seed=2)


def assert_shared(videos) -> None:
    by_name = {v.name: v for v in videos}
    a, b, c, d = (by_name[n] for n in "abcd")
    for field in SHARED_FACTS:
        assert getattr(a, field) is getattr(b, field) is getattr(c, field), field
    assert a.frame_pts == b.frame_pts and a.frame_pts != d.frame_pts
    assert d.codec is a.codec and d.time_base is a.time_base
    # the frame size and the device: an int object a video otherwise (32 bytes each)
    assert d.width is a.width and d.height is a.height and a.height > 256
    assert d.identity[0] is a.identity[0]


def test_videos_probed_alike_share_their_facts(tmp_path):
    alike_and_other(tmp_path / "videos")
    assert_shared(scan_dataset(tmp_path / "videos", [".mp4"], workers=2).videos)


def test_videos_read_from_the_index_share_their_facts(tmp_path):
    """A warm mount reads each row's result text when a plan asks: shared as probed."""
    alike_and_other(tmp_path / "videos")
    index = os.fspath(tmp_path / "scan.json")
    scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=index)
    scan, thread = start_lazy_scan(tmp_path / "videos", [".mp4"], stop=threading.Event(),
                                   workers=1, index_path=index)
    scan.probes.wait_all()
    thread.join(10)
    assert_shared([scan.probes.result(f"{n}.mp4") for n in "abcd"])


def test_the_results_kept_for_the_index_share_their_facts(tmp_path, monkeypatch):
    """A cold scan keeps each probe's result until its index is written: with the facts of
    the videos probed alike, not the copies unpickled from each probe (~780 -> ~175 bytes a
    result; 250,000 videos' copies, held as the scan ran beside serving and planning, left
    ~100 MB of pymalloc's pools mapped once let go: docs/performance.md#dataset-scale)."""
    alike_and_other(tmp_path / "videos")
    kept, real = {}, scan_module._Listing.let_go

    def let_go(listing):
        kept.update(listing.results)
        real(listing)

    monkeypatch.setattr(scan_module._Listing, "let_go", let_go)
    scan, thread = start_lazy_scan(tmp_path / "videos", [".mp4"], stop=threading.Event(),
                                   workers=2, index_path=os.fspath(tmp_path / "scan.json"))
    scan.probes.wait_all()
    thread.join(10)
    a, b, c, d = (kept[f"{n}.mp4"] for n in "abcd")
    for field in SHARED_FACTS:
        assert getattr(a, field) is getattr(b, field) is getattr(c, field), field
        assert getattr(a, field) is getattr(scan.probes.result("a.mp4"), field), field
    assert a.counted_by is b.counted_by is d.counted_by
    assert a.frame_pts != d.frame_pts and d.codec is a.codec
