"""The demuxing scan: packet counts equal a full decode wherever they are trusted, untrusted kinds
are decoded instead, a decode catches what packets cannot show, and progress is reported."""

from __future__ import annotations

import gc
import io
import logging
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest

from sandfs.fileio import read_checked_json, write_checked_json, write_checked_pieces
from sandfs.media import probe, resulttext, scan_index
from sandfs.media.decode import ScanMismatch, decode_all_reference, decode_each, decode_frames
from sandfs.media.mp4box import SAMPLE_TABLES
from sandfs.media.scan import StderrProgress, format_progress, scan_dataset
from sandfs.media.scan_index import ROWS_VERSION, SCAN_VERSION
from sandfs.media.synth import make_dataset, read_painted_index, write_test_video
from sandfs.media.types import PACKETS, MediaLimits, ProbeFacts, ScanProgress, VideoInfo
from tests.helpers.corpus import AV1_ENCODER, write_bitflipped
from tests.helpers.scanindex import edit_entry

B3 = {"bframes": 3, "b_adapt": False}  # every B slot used, with b-pyramid


@dataclass(frozen=True)
class Kind:
    name: str  # file name; the extension picks the container
    trusted: bool  # counted from packets (False: decoded in full)
    build: Callable[[Path], None]
    needs: str | None = None  # an encoder or tool this machine may lack


def _video(codec: str = "libx264", **kwargs: object) -> Callable[[Path], None]:
    options = {"num_frames": 40, "width": 64, "height": 48, "noise": True, "gop": 12}
    return lambda path: write_test_video(path, codec=codec, **{**options, **kwargs})  # type: ignore[arg-type]


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def _edit_list(path: Path) -> None:
    """A stream copy from 1.3 s: mp4 keeps the GOP's earlier packets, hidden by an edit list."""
    source = path.with_name("source_for_" + path.name)
    _video(num_frames=80, **B3)(source)
    _ffmpeg("-ss", "1.3", "-i", str(source), "-c", "copy", str(path))
    source.unlink()


def _truncated_tail(path: Path) -> None:
    _video(**B3)(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 7 // 10])


def _ts_twice(path: Path) -> None:
    """Two MPEG-TS files back to back: the second one's timestamps start again."""
    _video(**B3)(path)
    path.write_bytes(path.read_bytes() * 2)


def _ts_cut_mid_gop(path: Path) -> None:
    _video(num_frames=60, **B3)(path)
    data = path.read_bytes()
    path.write_bytes(data[188 * (len(data) // 188 // 3) :])  # whole TS packets, a GOP begun


KINDS = (
    Kind("h264_b3_mp4.mp4", True, _video(**B3)),
    Kind("h264_b3_mov.mov", True, _video(**B3)),
    Kind("h264_b3_mkv.mkv", True, _video(**B3)),
    Kind("h264_b3_ts.ts", True, _video(**B3)),
    Kind("hevc_b3_mp4.mp4", True, _video("libx265", **B3), "libx265"),
    Kind("hevc_b3_mkv.mkv", True, _video("libx265", **B3), "libx265"),
    Kind("vp9.webm", True, _video("libvpx-vp9"), "libvpx-vp9"),
    Kind("av1.mp4", True, _video(AV1_ENCODER, width=64, height=64), AV1_ENCODER),
    Kind("mpeg4_b2_mp4.mp4", True, _video("mpeg4", bframes=2), "mpeg4"),
    Kind("mpeg4.avi", True, _video("mpeg4"), "mpeg4"),
    Kind("mpeg2_b2_mpg.mpg", True, _video("mpeg2video", bframes=2), "mpeg2video"),
    Kind("mpeg1_b2_mpg.mpg", True, _video("mpeg1video", bframes=2), "mpeg1video"),
    Kind("mjpeg.avi", True, _video("mjpeg", pix_fmt="yuvj420p"), "mjpeg"),
    Kind("vfr_b3.mkv", True, _video(vfr=True, **B3)),
    Kind("shifted_pts.mkv", True, _video(start_pts=-7, **B3)),  # the muxer shifts them to 0
    # kept negative, matroska's demuxer gives those packets no pts at all
    Kind("negative_pts.mkv", False,
         _video(start_pts=-7, container_options={"avoid_negative_ts": "disabled"}, **B3)),
    Kind("edit_list.mp4", True, _edit_list, "ffmpeg"),
    Kind("truncated_tail.mkv", True, _truncated_tail),
    Kind("raw.h264", False, _video()),
    Kind("h264_b3_avi.avi", False, _video(**B3)),
    Kind("vp8.webm", False, _video("libvpx"), "libvpx"),
    Kind("ts_twice.ts", False, _ts_twice),
    Kind("ts_cut_mid_gop.ts", False, _ts_cut_mid_gop),
)


def _missing(kind: Kind) -> str | None:
    if kind.needs == "ffmpeg":
        return None if shutil.which("ffmpeg") else "no ffmpeg command"
    if kind.needs and kind.needs not in av.codecs_available:
        return f"encoder {kind.needs} is not in this FFmpeg build"
    return None


@pytest.fixture(scope="module")
def kinds_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    for kind in KINDS:
        if not _missing(kind):
            kind.build(root / kind.name)
    return root


@pytest.fixture(scope="module")
def kinds_scan(kinds_dir: Path) -> dict[str, VideoInfo]:
    scan = scan_dataset(kinds_dir, {Path(kind.name).suffix for kind in KINDS})
    return {video.rel_path: video for video in scan.videos}


def _decoded_facts(path: Path, stream_index: int) -> tuple[int, list[int | None], list[int]]:
    """(frames, pts, keyframe indices) as a plain full decode returns them."""
    with av.open(str(path)) as container:
        frames = list(container.decode(container.streams[stream_index]))
    keyframes = [i for i, frame in enumerate(frames) if frame.key_frame]
    return len(frames), [frame.pts for frame in frames], keyframes


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_packet_counts_equal_a_full_decode(kind: Kind, kinds_dir: Path):
    if _missing(kind):
        pytest.skip(_missing(kind))
    path = kinds_dir / kind.name
    facts = probe.probe_video(str(path), MediaLimits())
    assert isinstance(facts, ProbeFacts), facts
    assert (facts.counted_by in (PACKETS, SAMPLE_TABLES)) == kind.trusted, facts.counted_by
    num_frames, pts, keyframes = _decoded_facts(path, facts.stream_index)
    assert facts.num_frames == num_frames
    assert facts.keyframe_indices == tuple(keyframes)
    if facts.frame_pts:
        assert list(facts.frame_pts) == pts


@pytest.mark.parametrize("kind", [k for k in KINDS if k.trusted], ids=lambda k: k.name)
def test_seeks_land_on_keyframes_from_packets(
    kind: Kind, kinds_scan: dict[str, VideoInfo], caplog: pytest.LogCaptureFixture
):
    """Every seek lands where the packets' keyframes say (no sequential fallback), and every
    5th frame equals the reference."""
    if _missing(kind):
        pytest.skip(_missing(kind))
    video = kinds_scan[kind.name]
    reference = decode_all_reference(video.path, video.stream_index)
    wanted = list(range(video.num_frames - 1, 0, -5))
    with caplog.at_level(logging.INFO, logger="sandfs.media.decode"):
        result = decode_frames(video, wanted)
    assert "landed off plan" not in caplog.text
    assert [read_painted_index(result.frames[i]) for i in wanted] == [
        read_painted_index(reference[i]) for i in wanted
    ]


# ----------------------------------------------------------------------------- scan mismatches


def _scanned_with_index(tmp_path: Path, num_frames: int) -> tuple[Path, Path]:
    """Two videos scanned with an index: (root, index path, the index document)."""
    root = tmp_path / "data"
    make_dataset(root, classes=1, videos_per_class=2, num_frames=(num_frames, num_frames))
    index_path = tmp_path / "index.json"
    scan_dataset(root, ["mp4"], index_path=index_path)
    return root, index_path


def five_more_frames(result: dict) -> None:
    facts = result["video"]
    facts["num_frames"] += 5
    facts["frame_pts"][-1] += 5  # [first, step, count]: 5 more pts at the same step


def test_an_index_entry_promising_more_frames_fails_the_decode(tmp_path: Path):
    root, index_path = _scanned_with_index(tmp_path, 20)
    edit_entry(index_path, "class00/class00_000.mp4", five_more_frames)  # sound, lying
    scan = scan_dataset(root, ["mp4"], index_path=index_path)
    assert scan.num_probed == 0
    lying = scan.videos[0]
    assert lying.num_frames == 25
    with pytest.raises(ScanMismatch, match="only 20 frames") as raised:
        decode_frames(lying, [3, 22])  # frame 3 exists, but no bytes come back for any
    assert (raised.value.path, raised.value.found) == (lying.path, "only 20 frames")
    assert "frame 22 of 25" in raised.value.expected
    assert sorted(decode_frames(lying, [3, 19]).frames) == [3, 19]  # the real frames still serve


def test_frame_by_frame_the_real_frames_come_before_the_mismatch(tmp_path: Path):
    """`decode_each` hands over each frame once it is checked: a pass whose later frames do
    not exist still yields the exact frames before them, then raises."""
    root, index_path = _scanned_with_index(tmp_path, 20)
    edit_entry(index_path, "class00/class00_000.mp4", five_more_frames)
    lying = scan_dataset(root, ["mp4"], index_path=index_path).videos[0]
    reference = decode_all_reference(lying.path)
    got = []
    with pytest.raises(ScanMismatch, match="only 20 frames"):
        for index, frame in decode_each(lying, [3, 12, 22]):
            got.append(index)
            assert np.array_equal(frame, reference[index])
    assert got == [3, 12]


def test_bit_errors_scan_as_usable_and_fail_their_decode(tmp_path: Path):
    """Packets cannot show damage inside a frame: the first decode that meets it raises."""
    write_bitflipped(tmp_path / "bitflip.mp4", tmp_path)
    (video,) = scan_dataset(tmp_path, ["mp4"]).videos
    assert video.num_frames == 100
    with pytest.raises(ScanMismatch, match="decoded with errors"):
        decode_frames(video, range(video.num_frames))


# ----------------------------------------------------------------------------- progress, index


def test_progress_counts_every_video_once(tmp_path: Path):
    root = tmp_path / "data"
    make_dataset(root, classes=2, videos_per_class=3, num_frames=(5, 8))
    (root / "bad.mp4").write_text("not a video")
    index_path = tmp_path / "index.json"
    seen: list[ScanProgress] = []
    scan_dataset(root, ["mp4"], index_path=index_path, progress=seen.append)
    assert [(p.videos_scanned, p.videos_total) for p in seen] == [(i, 7) for i in range(8)]
    assert [p.seconds for p in seen] == sorted(p.seconds for p in seen)
    seen.clear()
    scan_dataset(root, ["mp4"], index_path=index_path, progress=seen.append)
    assert [(p.videos_scanned, p.videos_total) for p in seen] == [(7, 7), (7, 7)]  # all indexed


def test_stderr_progress_line():
    stream = io.StringIO()
    show = StderrProgress(stream, interval_seconds=10.0)
    show(ScanProgress(0, 4, 0.0))
    show(ScanProgress(1, 4, 2.0))  # within the interval: not shown
    show(ScanProgress(4, 4, 8.0))  # the last one always is
    assert stream.getvalue().splitlines() == [
        "scan: 0/4 videos (0.0 %), 0 s",
        "scan: 4/4 videos (100.0 %), 8 s, about 0 s left",
    ]
    assert format_progress(ScanProgress(1, 4, 2.0)).endswith("(25.0 %), 2 s, about 6 s left")


def test_an_index_of_the_decoding_scan_is_rebuilt(tmp_path: Path):
    root, index_path = _scanned_with_index(tmp_path, 6)
    document = read_checked_json(str(index_path))
    assert document["scan_version"] == SCAN_VERSION
    document["scan_version"] = ROWS_VERSION - 1  # the last whose results meant otherwise
    write_checked_json(str(index_path), document)  # sound file, lying entry
    assert scan_dataset(root, ["mp4"], index_path=index_path).num_probed == 2


def test_the_scan_index_is_built_and_written_without_cyclic_collections(tmp_path: Path,
                                                                          monkeypatch):
    """Its rows are garbage once written: the collector is off while they are made (250,000
    of them made full collections walk them again and again), on again after."""
    make_dataset(tmp_path / "videos", classes=1, videos_per_class=2, num_frames=(8, 8))
    enabled = []

    def write(path, pieces, **kwargs):
        def checked():
            for piece in pieces:  # the rows are made as they are written
                enabled.append(gc.isenabled())
                yield piece

        write_checked_pieces(path, checked(), **kwargs)

    monkeypatch.setattr(scan_index, "write_checked_pieces", write)
    assert gc.isenabled()
    scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=tmp_path / "index.json")
    assert enabled and not any(enabled) and gc.isenabled()
    assert read_checked_json(str(tmp_path / "index.json"))["count"] == 2


def test_the_probe_workers_make_the_index_texts_not_the_scan_s_process(tmp_path: Path,
                                                                       monkeypatch):
    """A usable video's index text comes with its result from the worker: saving the index
    encodes none of them here (250,000 took 1.3 s of the daemon's GIL), and reads back the
    same results a scan in this process finds."""
    make_dataset(tmp_path / "videos", classes=1, videos_per_class=3, num_frames=(8, 8))
    made_here = []
    real = resulttext.result_text
    monkeypatch.setattr(scan_index, "result_text",
                        lambda result: made_here.append(result) or real(result))
    index = tmp_path / "index.json"
    found = scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=index)
    assert made_here == []
    again = scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=index)
    assert again.num_probed == 0 and again.videos == found.videos
