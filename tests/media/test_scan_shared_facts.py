"""Videos that probe alike share their facts' objects: a cold mount of 250,000 videos held a
copy of each one's frame pts, time base, keyframes, codec, pixel format and frame size,
unpickled from its probe, and of its device number
(docs/performance.md#startup-and-joining-at-scale)."""

from __future__ import annotations

import os
import threading

from sandfs.media import scan as scan_module
from sandfs.media.resulttext import result_from_text
from sandfs.media.scan import SHARED_FACTS, scan_dataset, start_lazy_scan
from sandfs.media.synth import write_test_video
from sandfs.media.types import ProbeFailure


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


def test_a_cold_scan_keeps_for_its_index_each_result_s_text_not_a_record(tmp_path, monkeypatch):
    """Until its index is written, a cold scan keeps each usable video's index text as its
    worker made it, and no record of the result (250,000 records beside their texts, made as
    the scan ran beside serving and planning, held ~110 MB to its end, and pymalloc's pools
    stayed mapped once they were let go: docs/performance.md#dataset-scale); a file that is
    no video, its failure."""
    alike_and_other(tmp_path / "videos")
    (tmp_path / "videos" / "e.mp4").write_bytes(b"no video" * 64)
    kept, real = {}, scan_module._Listing.let_go

    def let_go(listing):
        kept.update(listing.found)
        real(listing)

    monkeypatch.setattr(scan_module._Listing, "let_go", let_go)
    scan, thread = start_lazy_scan(tmp_path / "videos", [".mp4"], stop=threading.Event(),
                                   workers=2, index_path=os.fspath(tmp_path / "scan.json"))
    scan.probes.wait_all()
    thread.join(10)
    assert {name: type(value) for name, value in kept.items()} == {
        **{f"{n}.mp4": str for n in "abcd"}, "e.mp4": ProbeFailure}
    for n in "abcd":
        video, facts = scan.probes.result(f"{n}.mp4"), result_from_text(kept[f"{n}.mp4"])
        assert (facts.num_frames, facts.frame_pts) == (video.num_frames, video.frame_pts)
