"""The dataset scan: every corpus file classified as the bad-input table expects, fast, and
remembered."""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import av
import pytest

from sandfs.fileio import DAMAGED
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import make_dataset, write_test_video
from sandfs.media.types import DatasetScan, MediaLimits
from sandfs.media.walk import vetted_targets
from tests.helpers.corpus import CORPUS, EXTENSIONS, IGNORED, Corpus, CorpusScan
from tests.helpers.reliability import record
from tests.helpers.scanindex import edit_entry

BAD_REASONS = {
    "open_invalid", "no_video_stream", "not_regular", "outside_root", "corrupt_frames",
    "too_large", "name_collision", "no_frames", "decode_timeout", "not_a_video",
}  # fmt: skip


def _outcome(scan: DatasetScan, rel_path: str) -> list[str | None]:
    """Every classification `rel_path` got: a reason per BadVideo, None per VideoInfo."""
    return [b.reason for b in scan.bad if b.rel_path == rel_path] + [
        None for v in scan.videos if v.rel_path == rel_path
    ]


def _crashes_or_hangs(scan: DatasetScan, rel_path: str) -> int:
    """How often probing `rel_path` killed its worker process, raised, or ran out of time (the
    scan survives all three: each shows as a bad file)."""
    return sum(b.reason == "decode_timeout" or b.detail.startswith(
        ("the decoder process died", "probe failed:")) for b in scan.bad if b.rel_path == rel_path)


@pytest.mark.parametrize("item", CORPUS, ids=[ascii(c.rel_path) for c in CORPUS])
def test_corpus_file_is_classified_as_expected(item, corpus: Corpus, corpus_scan: CorpusScan):
    if item.missing:
        pytest.skip(item.missing)
    outcome = _outcome(corpus_scan.scan, item.rel_path)
    if item.reason is not None:
        record("bad_inputs", tried=1, misclassified=int(outcome != [item.reason]),
               crash_or_hang=_crashes_or_hangs(corpus_scan.scan, item.rel_path))
    assert outcome == [item.reason]
    if item.reason is not None:
        return
    video = next(v for v in corpus_scan.scan.videos if v.rel_path == item.rel_path)
    expected = (item.num_frames, item.size, item.seekable, item.rotation, item.pix_fmt)
    assert (video.num_frames, (video.width, video.height), video.seekable) == expected[:3]
    assert (video.rotation, video.pix_fmt) == expected[3:]
    assert (video.codec, video.stream_index) == (item.codec, item.stream_index)
    assert len(video.frame_pts) == (video.num_frames if video.seekable else 0)
    assert video.keyframe_indices[0] == 0


def test_only_corpus_files_are_reported(corpus: Corpus, corpus_scan: CorpusScan):
    reported = {b.rel_path for b in corpus_scan.scan.bad} | {
        v.rel_path for v in corpus_scan.scan.videos
    }
    assert reported == set(corpus.files)
    assert not any(path.startswith(IGNORED) for path in reported)  # hidden, other ext, linked dir


def test_scan_is_quick_and_sorted(corpus_scan: CorpusScan):
    scan = corpus_scan.scan
    assert corpus_scan.elapsed_seconds < 30
    assert [v.name for v in scan.videos] == sorted(v.name for v in scan.videos)
    assert [b.rel_path for b in scan.bad] == sorted(b.rel_path for b in scan.bad)
    assert {b.reason for b in scan.bad} <= BAD_REASONS


def test_each_bad_file_logs_one_escaped_warning_line(corpus_scan: CorpusScan):
    warnings = [r.getMessage() for r in corpus_scan.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(corpus_scan.scan.bad)
    for bad, message in zip(corpus_scan.scan.bad, warnings, strict=True):
        assert "\n" not in message
        assert message.startswith(f"video={os.path.splitext(bad.rel_path)[0]!a} ")
        assert f" path={bad.rel_path!a} reason={bad.reason} detail=" in message
    forged = [m for m in warnings if "forge" in m]
    assert forged == [next(m for m in warnings if m.startswith("video='names/forge\\nvideo=x"))]


def test_collision_names_the_earlier_file(corpus_scan: CorpusScan):
    details = {b.rel_path: b.detail for b in corpus_scan.scan.bad}
    assert details["collide/a.mp4"] == "name collides with collide/a.MKV"
    assert details["collide/b/c.mp4"] == "name collides with collide/b.mp4"


def test_symlink_inside_the_root_resolves(corpus: Corpus, corpus_scan: CorpusScan):
    video = next(v for v in corpus_scan.scan.videos if v.rel_path == "valid/link_inside.mp4")
    assert (video.name, video.path) == ("valid/link_inside", str(corpus.root / "valid/plain.mp4"))


def test_timestamps_are_the_decoders(corpus: Corpus, corpus_scan: CorpusScan):
    for rel_path in ("valid/vfr.mp4", "valid/start_pts.mp4", "valid/bframes.mp4"):
        video = next(v for v in corpus_scan.scan.videos if v.rel_path == rel_path)
        with av.open(str(corpus.root / rel_path)) as container:
            times = [frame.time for frame in container.decode(video=0)]
        assert [video.timestamp_seconds(i) for i in range(video.num_frames)] == times
    start = next(v for v in corpus_scan.scan.videos if v.rel_path == "valid/start_pts.mp4")
    assert start.timestamp_seconds(0) == 2.0  # start_pts 50 at 25 fps
    raw = next(v for v in corpus_scan.scan.videos if v.rel_path == "valid/raw.h264")
    assert raw.timestamp_seconds(0) is None


def test_second_scan_comes_from_the_index(corpus: Corpus, corpus_scan: CorpusScan):
    again = scan_dataset(corpus.root, EXTENSIONS, index_path=corpus_scan.index_path)
    assert again.num_probed == 0
    assert (again.videos, again.bad) == (corpus_scan.scan.videos, corpus_scan.scan.bad)


# ----------------------------------------------------------------------------- the index


@pytest.fixture
def small_dataset(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    make_dataset(root, classes=2, videos_per_class=2, num_frames=(10, 20))
    return root


def test_changed_file_is_probed_again(small_dataset: Path, tmp_path: Path):
    index_path = tmp_path / "index.json"
    first = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    changed = small_dataset / "class00/class00_000.mp4"
    write_test_video(changed, num_frames=7, width=64, height=48)
    second = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    assert (first.num_probed, second.num_probed) == (4, 1)
    assert next(v for v in second.videos if v.name == "class00/class00_000").num_frames == 7
    assert second.videos[1:] == first.videos[1:]


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"format": "someone-else", "entries": {}}', b'{"format": 1}', b"[]"]
)
def test_corrupt_or_foreign_index_is_ignored(small_dataset: Path, tmp_path: Path, caplog, content):
    index_path = tmp_path / "index.json"
    index_path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="sandfs.media.scan"):
        scan = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    assert scan.num_probed == 4 and len(scan.videos) == 4
    assert any("ignoring the scan index" in r.getMessage() for r in caplog.records)
    assert json.loads(index_path.read_text())["format"] == "sandfs-scan-index"  # rewritten
    assert not list(tmp_path.glob("*.tmp"))


def one_more_frame(result: dict) -> None:
    result["video"]["num_frames"] += 1


def test_inconsistent_index_entry_is_ignored(small_dataset: Path, tmp_path: Path, caplog):
    index_path = tmp_path / "index.json"
    first = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    # a sound file with a wrong entry: one pts short of the frame count
    edit_entry(index_path, "class00/class00_000.mp4", one_more_frame)
    with caplog.at_level(logging.WARNING, logger="sandfs.media.scan"):
        second = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    assert "inconsistent entry" in caplog.text
    assert (second.num_probed, second.videos) == (1, first.videos)  # that file probed again


def test_changed_limits_invalidate_the_index(small_dataset: Path, tmp_path: Path):
    index_path = tmp_path / "index.json"
    scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    strict = scan_dataset(
        small_dataset, ["mp4"], limits=MediaLimits(max_frames=12), index_path=index_path
    )
    assert strict.num_probed == 4
    assert {b.reason for b in strict.bad} <= {"too_large"}
    assert all(v.num_frames <= 12 for v in strict.videos)


# ----------------------------------------------------------------------------- limits, timeouts


def test_decode_timeout_is_enforced_and_not_remembered(tmp_path: Path):
    root = tmp_path / "data"
    root.mkdir()
    # raw H.264 has no timestamps: counted by decoding, slow enough to time out
    write_test_video(root / "long.h264", num_frames=1500, width=160, height=120, noise=True)
    shutil.copy(root / "long.h264", root / "other.h264")
    index_path = tmp_path / "index.json"
    limits = MediaLimits(decode_timeout_seconds=0.01)
    scan = scan_dataset(root, ["h264"], limits=limits, workers=1, index_path=index_path)
    assert [(b.rel_path, b.reason) for b in scan.bad] == [
        ("long.h264", "decode_timeout"),
        ("other.h264", "decode_timeout"),  # the killed worker was replaced
    ]
    again = scan_dataset(root, ["h264"], index_path=index_path)
    assert again.num_probed == 2 and [v.num_frames for v in again.videos] == [1500, 1500]


def test_pixels_are_checked_before_decoding(small_dataset: Path, monkeypatch):
    monkeypatch.setenv("SANDFS_MAX_PIXELS", str(64 * 48 - 1))
    scan = scan_dataset(small_dataset, ["mp4"])
    assert {b.reason for b in scan.bad} == {"too_large"} and not scan.videos
    assert "64x48 = 3072 pixels > max_pixels 3071" in scan.bad[0].detail


def test_file_size_limit_needs_no_open(small_dataset: Path):
    scan = scan_dataset(small_dataset, ["mp4"], limits=MediaLimits(max_file_bytes=100))
    assert scan.num_probed == 0 and {b.reason for b in scan.bad} == {"too_large"}


def test_limits_from_env():
    environ = {"SANDFS_MAX_PIXELS": "100", "SANDFS_DECODE_TIMEOUT": "2.5"}
    limits = MediaLimits.from_env(environ=environ)
    assert limits == replace(MediaLimits(), max_pixels=100, decode_timeout_seconds=2.5)
    assert MediaLimits.from_env(MediaLimits(max_frames=9), environ={}).max_frames == 9
    with pytest.raises(ValueError, match="SANDFS_MAX_FILE_BYTES='1e3': not a valid int"):
        MediaLimits.from_env(environ={"SANDFS_MAX_FILE_BYTES": "1e3"})
    with pytest.raises(ValueError, match="must be > 0"):
        MediaLimits.from_env(environ={"SANDFS_DECODE_TIMEOUT": "0"})


def test_missing_root_is_an_error(tmp_path: Path):
    with pytest.raises(NotADirectoryError):
        scan_dataset(tmp_path / "nope", ["mp4"])


def test_empty_dataset_starts_no_worker(tmp_path: Path):
    assert scan_dataset(tmp_path, ["mp4"]) == DatasetScan(str(tmp_path), (), (), 0)


def test_a_flipped_byte_in_the_index_is_found_and_the_index_rebuilt(small_dataset: Path,
                                                                   tmp_path: Path, caplog):
    """A bit flip that keeps the JSON and the entry valid (a width 64 -> 65) would silently
    change user.sand.meta: the checksum finds it, the index is discarded, counted and rebuilt."""
    index_path = tmp_path / "index.json"
    first = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    raw = index_path.read_bytes()
    at = raw.index(b'"[64,') + len(b'"[6')  # the width, first of its result's facts
    index_path.write_bytes(raw[:at] + b"5" + raw[at + 1:])
    damaged = DAMAGED.count
    with caplog.at_level(logging.WARNING):
        second = scan_dataset(small_dataset, ["mp4"], index_path=index_path)
    assert DAMAGED.count == damaged + 1
    assert "is damaged" in caplog.text
    assert (second.num_probed, second.videos) == (4, first.videos)
    assert index_path.read_bytes() == raw  # rebuilt


def test_a_file_vanishing_during_the_listing_is_refused_by_its_stat(tmp_path, monkeypatch):
    """A file removed between its folder's listing and its stat is a bad file of the listing
    (it keeps its name), never an error of the scan."""
    root = tmp_path / "videos"
    (root / "a").mkdir(parents=True)
    for name in ("x", "y", "z"):
        (root / "a" / f"{name}.mp4").write_bytes(b"not probed here")
    listed = os.fwalk

    def vanishing(*args, **kwargs):
        for dir_path, dir_names, file_names, dir_fd in listed(*args, **kwargs):
            if "y.mp4" in file_names:
                os.unlink(os.path.join(dir_path, "y.mp4"))
            yield dir_path, dir_names, file_names, dir_fd

    monkeypatch.setattr(os, "fwalk", vanishing)
    targets, bad, _ = vetted_targets(str(root), [".mp4"], MediaLimits())
    assert [t.rel_path for t in targets] == ["a/x.mp4", "a/z.mp4"]
    assert [(b.rel_path, b.reason) for b in bad] == [("a/y.mp4", "open_invalid")]
    assert "No such file" in bad[0].detail
