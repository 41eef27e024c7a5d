"""What a scan keeps per video (docs/design.md#scan-records): a few hundred bytes held for the
mount's life, and records that read, compare, pickle and `dataclasses.replace` as the frozen
dataclasses they replaced."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from sandfs.media.probebook import ProbeBook
from sandfs.media.records import _PLACES
from sandfs.media.scan import start_lazy_scan
from sandfs.media.types import ListedVideo, VideoInfo

SIZES = (200, 800)  # videos: the bytes a video are the difference's, fixed costs left out
# beside its path's string: the records, the packed stat, the book's dict entry, ~180 bytes a
# video (docs/performance.md#memory); as frozen dataclasses of every field, ~600
BOUND_BYTES_PER_VIDEO = 230


def link_dataset(root: Path, sources: list[Path], videos: int) -> Path:
    """`videos` hard links to the sources, 100 to a folder."""
    for i in range(videos):
        folder = root / f"class_{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        os.link(sources[i % len(sources)], folder / f"clip_{i:05d}.mp4")
    return root


def held_bytes(root: Path, index: Path) -> tuple[int, object]:
    """Bytes a lazy scan run to its end holds (tracemalloc), and the scan."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        scan, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=2,
                                       index_path=index)
        thread.join()
        scan.probes.wait_all()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not scan.bad
    return held, scan


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_scan_holds_few_bytes_a_video(tmp_path, dataset_dir, warm):
    sources = sorted(dataset_dir.rglob("*.mp4"))
    held = []
    for videos in SIZES:
        root = link_dataset(tmp_path / f"linked-dataset-of-{videos}-videos", sources, videos)
        index = tmp_path / f"scan-index-{videos}.json"
        if warm:  # listed from the index, each entry read as the thread gets to it
            held_bytes(root, index)
        found, scan = held_bytes(root, index)
        held.append(found)
    path_bytes = sys.getsizeof(scan.listed[-1].path)  # the one string a video keeps
    per_video = (held[1] - held[0]) / (SIZES[1] - SIZES[0]) - path_bytes
    assert per_video <= BOUND_BYTES_PER_VIDEO, f"{per_video:.0f} bytes a video and its path"
    infos = [scan.probes.known(v.rel_path) for v in scan.listed]
    facts = [info.facts for info in infos]
    assert len(set(facts)) == len({id(f) for f in facts}) < 13  # equal ones: one object
    assert all(info.listed is listed for info, listed in zip(infos, scan.listed, strict=True))
    print(f"{per_video:.1f} bytes a video and its path's {path_bytes}")


def make_info(**changes) -> VideoInfo:
    fields = dict(name="c/v1", rel_path="c/v1.mp4", path="/data/set/c/v1.mp4",
                  size_bytes=5 << 40, mtime_ns=-1_700_000_000_123_456_789, width=320,
                  height=240, num_frames=3, frame_pts=(0, 512, 1024), keyframe_indices=(0,),
                  identity=(2049, (1 << 64) - 1), access=(1000, 1000, 0o100644))
    return VideoInfo(**{**fields, **changes})


def test_video_info_reads_as_its_fields():
    info = make_info()
    assert (info.name, info.rel_path, info.path) == ("c/v1", "c/v1.mp4", "/data/set/c/v1.mp4")
    assert (info.size_bytes, info.mtime_ns) == (5 << 40, -1_700_000_000_123_456_789)
    assert info.identity == (2049, (1 << 64) - 1) and info.access == (1000, 1000, 0o100644)
    assert list(info.frame_pts) == [0, 512, 1024] and info.keyframe_indices == (0,)
    assert dataclasses.asdict(info)["path"] == info.path
    assert [f.name for f in dataclasses.fields(info)][:3] == ["name", "rel_path", "path"]
    assert "rel_path='c/v1.mp4'" in repr(info) and "frame_pts" not in repr(info)


@pytest.mark.parametrize("change", [
    {"path": "/elsewhere/c/v1.mp4"}, {"name": "c/other", "rel_path": "c/other.mkv"},
    {"size_bytes": 6}, {"mtime_ns": 0}, {"identity": None}, {"identity": (2049, 3)},
    {"access": (0, 0, 0o100600)}, {"access": None}, {"num_frames": 4}, {"codec": "h264"},
], ids=repr)
def test_replace_changes_one_field_alone(change):
    info = make_info()
    changed = dataclasses.replace(info, **change)
    assert changed != info and changed == make_info(**change)
    assert hash(changed) == hash(make_info(**change))
    unchanged = {f.name for f in dataclasses.fields(info)} - set(change)
    assert all(getattr(changed, f) == getattr(info, f) for f in unchanged)
    assert all(getattr(changed, f) == value for f, value in change.items())


@pytest.mark.parametrize("odd", [
    {"path": "/data/elsewhere/target.mp4"},  # a symlink's target: its path is kept
    {"name": "renamed"}, {"rel_path": "c/v1"}, {"path": "v1.mp4", "rel_path": "/v1.mp4"},
], ids=repr)
def test_a_path_or_name_not_of_the_root_is_kept(odd):
    info = make_info(**odd)
    expected = {**{"name": "c/v1", "rel_path": "c/v1.mp4", "path": "/data/set/c/v1.mp4"}, **odd}
    assert {f: getattr(info, f) for f in expected} == expected
    assert pickle.loads(pickle.dumps(info)) == info


def test_records_pickle_equal_and_share_their_place():
    info = make_info()
    again = pickle.loads(pickle.dumps(info))
    assert again == info and hash(again) == hash(info)
    assert again.listed._place is info.listed._place  # one per root, device and access
    listed = info.listed
    assert pickle.loads(pickle.dumps(listed)) == listed != info
    assert ListedVideo(*(getattr(info, f) for f in (
        "name", "rel_path", "path", "size_bytes", "mtime_ns", "identity", "access"))) == listed


def test_records_are_immutable():
    info = make_info()
    for record, field in ((info, "path"), (info, "rel_path"), (info.listed, "rel_path"),
                          (info.listed, "size_bytes"), (info, "listed"), (info, "facts")):
        with pytest.raises(AttributeError):
            setattr(record, field, "x")


@pytest.mark.parametrize("stat", [
    {"size_bytes": -1}, {"size_bytes": 1 << 64}, {"mtime_ns": 1 << 63},
    {"identity": (1, -2)}, {"identity": (1, 1 << 64)},
], ids=repr)
def test_a_stat_out_of_64_bits_is_refused(stat):
    with pytest.raises(ValueError, match="must each fit 64 bits"):
        make_info(**stat)


def test_the_book_finds_each_result_by_rel_path_keyed_by_its_path():
    """A listing's results are keyed by the videos' own path strings (no string of their own);
    a symlink's (its path elsewhere) and a book of several roots still find theirs."""
    infos = [make_info(name=f"c/v{i}", rel_path=f"c/v{i}.mp4", path=f"/data/set/c/v{i}.mp4")
             for i in range(3)]
    linked = make_info(name="c/link", rel_path="c/link.mp4", path="/data/elsewhere/t.mp4")
    other_root = make_info(name="d/v9", rel_path="d/v9.mp4", path="/data/other/d/v9.mp4")
    for videos in ([*infos, linked], [*infos, other_root]):
        book = ProbeBook([v.listed for v in videos])
        for video in videos:
            book.record(video.rel_path, video)
        assert all(book.known(v.rel_path) is v for v in videos[:3]), videos
        assert book.result(videos[-1].rel_path) is videos[-1]
        assert book.known("c/missing.mp4") is None
    book = ProbeBook([v.listed for v in infos])
    for video in infos:
        book.record(video.rel_path, video)
    assert {id(key) for key in book._results} == {id(v.path) for v in infos}


def test_a_link_under_a_folder_of_its_own_leaves_the_book_its_listing_root():
    """A symlink whose target ends in "/" + its rel_path (under the root, so the walk takes
    it) has a root of its own; the book still keys the listing's videos by their own path
    strings, the link by a key of its own. So do videos of one root but other modes."""
    infos = [make_info(name=f"c/v{i}", rel_path=f"c/v{i}.mp4", path=f"/data/set/c/v{i}.mp4",
                       access=(1000, 1000, 0o100644 if i else 0o100600)) for i in range(3)]
    linked = make_info(name="c/link", rel_path="c/link.mp4", path="/data/set/old/c/link.mp4")
    assert linked.root == "/data/set/old/" and infos[0].root == "/data/set/"
    book = ProbeBook([v.listed for v in [*infos, linked]])
    for video in [*infos, linked]:
        book.record(video.rel_path, video)
    assert all(book.known(v.rel_path) is v for v in [*infos, linked])
    held = {id(key) for key in book._results}
    assert {id(v.path) for v in infos} <= held and id(linked.path) not in held


def test_places_of_records_let_go_are_gone():
    """A place (root, device, owner, mode) lives as long as a record holds it: remounts under
    new device numbers, chmods and datasets over a daemon's life leave none behind."""
    access = (0, 0, 0o100644)
    videos = [ListedVideo("c/v", "c/v.mp4", f"/data/set{i}/c/v.mp4", 1, 1, (i, 5), access)
              for i in range(50)]
    assert len({id(v._place) for v in videos}) == 50
    assert all((f"/data/set{i}/", i, access) in _PLACES for i in range(50))
    kept = ListedVideo("c/v", "c/v.mp4", "/data/kept/c/v.mp4", 1, 1, (99, 5), access)
    del videos
    gc.collect()
    assert not any((f"/data/set{i}/", i, access) in _PLACES for i in range(50))
    assert _PLACES[("/data/kept/", 99, access)] is kept._place
