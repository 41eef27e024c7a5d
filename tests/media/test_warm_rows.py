"""A warm listing's rows (docs/contract.md#warm-listing): a row is taken for the file the
dataset names now, never for what a symlink pointed at when the index was written; the same
files on a filesystem mounted again under another device number are listed by their stat, not
found `changed`; and a file replaced since is `changed` for a task's owner, not refused."""

from __future__ import annotations

import binascii
import collections
import functools
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sandfs.access import owner_of, owner_videos, stamped
from sandfs.config.loader import load_task_config
from sandfs.fileio import read_checked_json, write_checked_json
from sandfs.media import scan_index, walk
from sandfs.media.probebook import ProbeBook
from sandfs.media.records import listed_under, listing_place
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.scan_index import SCAN_VERSION, STAT_ROW, read_index
from sandfs.media.synth import make_dataset
from sandfs.media.types import IDENTITY_VERSION, PERMISSION_DENIED, ListedVideo, MediaLimits
from sandfs.media.walk import ScanTooLarge
from sandfs.plan.identity import dataset_identity
from tests.helpers.harness import task_config, write_config
from tests.helpers.scanindex import read_rows, write_rows


@pytest.fixture
def two_videos(tmp_path) -> Path:
    """c/c_000.mp4 (28 frames) and c/c_001.mp4 (32), seeded."""
    root = tmp_path / "videos"
    make_dataset(root, classes=["c"], videos_per_class=2, num_frames=(24, 40), size=(64, 48),
                 seed=1, gop=12)
    return root


def warm_scan(root: Path, index: Path, limits: MediaLimits | None = None):
    """A lazy scan of `root` with every result read, its thread done."""
    found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=1,
                                    index_path=index, limits=limits)
    found.probes.resolve_all()
    thread.join()
    return found


def warm_result(root: Path, index: Path, rel_path: str):
    found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=1,
                                    index_path=index)
    thread.join()
    return found.probes.result(rel_path)


@pytest.mark.parametrize("now", ["retargeted", "a regular file"])
def test_a_symlinked_video_is_what_its_link_names_now(tmp_path, two_videos, now):
    link, first, second = (two_videos / "c" / n for n in ("link.mp4", "c_000.mp4", "c_001.mp4"))
    link.symlink_to(first.name)
    index = tmp_path / "index.json"
    assert scan_dataset(two_videos, ["mp4"], index_path=index).videos[2].num_frames == 28
    link.unlink()
    if now == "retargeted":
        link.symlink_to(second.name)
    else:
        shutil.copy(second, link)
    result = warm_result(two_videos, index, "c/link.mp4")
    assert (result.path, result.num_frames) == (os.path.realpath(link), 32)


def test_another_device_number_lists_the_files_by_their_stat(tmp_path, two_videos):
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    document, rows = read_rows(index)
    # the same files, their filesystem mounted again
    document["root_device"] = os.stat(two_videos).st_dev + 1
    for row in rows.values():
        row[4][0] += 1
    write_rows(index, document, rows)
    results = [warm_result(two_videos, index, f"c/c_00{i}.mp4") for i in range(2)]
    assert collections.Counter(getattr(r, "reason", "ok") for r in results) == {"ok": 2}
    assert [r.num_frames for r in results] == [28, 32]
    # the index is written again with this device: the next mount lists from it
    assert read_checked_json(str(index))["root_device"] == os.stat(two_videos).st_dev



def test_a_row_s_record_is_the_one_a_cold_listing_makes(tmp_path, two_videos):
    """A warm listing makes its records from the rows without the checks that find a file's
    place (250,000 of them at each warm start): each equals the record the walk makes of the
    same file, its name, rel_path and place the same; a row of another path is not taken."""
    index = tmp_path / "index.json"
    cold = scan_dataset(two_videos, ["mp4"], index_path=index)
    root = os.path.realpath(two_videos) + "/"
    listed = read_index(index, MediaLimits()).listed(root, MediaLimits()).by_rel_path()
    for video in cold.listed:
        warm = listed[video.rel_path][0]
        assert warm == video and warm.root == video.root == root
        assert (warm.name, warm.rel_path, warm.path) == (video.name, video.rel_path, video.path)
        assert (warm.identity, warm.access, warm.size_bytes, warm.mtime_ns) == (
            video.identity, video.access, video.size_bytes, video.mtime_ns)
    document, rows = read_rows(index)
    rows["c/c_000.mp4"][0] = root + "c/c_001.mp4"  # another file's path: a link's target
    write_rows(index, document, rows)
    assert read_index(index, MediaLimits()).listed(root, MediaLimits()).rel_paths == ["c/c_001.mp4"]
    assert read_index(index, MediaLimits()).listed(root + "c/", MediaLimits()).rel_paths == []


def test_records_made_as_columns_are_those_made_one_by_one():
    """`listed_under` makes a whole index's records in C loops: each equals, and hashes as,
    the record `ListedVideo` makes of the same file, at the ends of every field's range."""
    place = listing_place("/data/", 7, (1000, 100, 0o100644))
    edges = [(1, 0, 1), ((1 << 64) - 1, -(1 << 63), (1 << 64) - 1), (5, (1 << 63) - 1, 0),
             (2, -1, 3), (3, 1_795_933_556_772_353_792, 2_146_593)]
    size, mtime, ino = (np.array(column, dtype) for column, dtype in zip(
        zip(*edges, strict=True), ("<u8", "<i8", "<u8"), strict=True))
    paths = [f"/data/c/v{i}.mp4" for i in range(len(edges))]
    made = listed_under([place] * len(edges), paths, size, mtime, ino)
    for video, path, (size_bytes, mtime_ns, inode) in zip(made, paths, edges, strict=True):
        one = ListedVideo(path[6:-4], path[6:], path, size_bytes, mtime_ns, (7, inode),
                          (1000, 100, 0o100644))
        assert video == one and hash(video) == hash(one) and repr(video) == repr(one)
        assert (video.size_bytes, video.mtime_ns, video.identity) == (size_bytes, mtime_ns,
                                                                      (7, inode))
    with pytest.raises(ValueError, match="one length"):
        listed_under([place], paths, size, mtime, ino)


def test_a_whole_index_lists_its_files_with_no_lookup_a_name(tmp_path, two_videos, monkeypatch):
    """An index whose usable rows are the walk's names, in its order (a complete scan's), gives
    the listing its records as they are, none looked up by name; one that is not (a row bad)
    is looked up a name at a time, and lists the same files."""
    monkeypatch.setattr(walk, "RECENT_NS", 0)  # folders just made: their walk is recorded
    index = tmp_path / "index.json"
    cold = scan_dataset(two_videos, ["mp4"], index_path=index)
    looked = []
    monkeypatch.setattr(scan_index.KnownRows, "__call__",
                        lambda self, rel_path: looked.append(rel_path) or None)
    found = warm_scan(two_videos, index)
    assert looked == [] and found.listed == cold.listed
    assert [found.probes.result(v.rel_path).num_frames for v in found.listed] == [28, 32]
    monkeypatch.undo()
    document, rows = read_rows(index)
    rows["c/c_001.mp4"][3] = '{"bad":{"reason":"decode_error","detail":"x"}}'  # a bad one's
    write_rows(index, document, rows)
    assert read_index(index, MediaLimits()).listed(
        os.path.realpath(two_videos) + "/", MediaLimits()).rel_paths == ["c/c_000.mp4"]
    monkeypatch.setattr(scan_index.KnownRows, "__call__", _counted(
        scan_index.KnownRows.__call__, looked))
    found = warm_scan(two_videos, index)
    assert set(looked) == {"c/c_000.mp4", "c/c_001.mp4"}
    assert found.listed == cold.listed
    assert found.probes.result("c/c_000.mp4").num_frames == 28
    assert found.probes.result("c/c_001.mp4").reason == "decode_error"


def _counted(call, looked: list):
    def counted(self, rel_path):
        looked.append(rel_path)
        return call(self, rel_path)
    return counted


@pytest.mark.parametrize("stat", [
    [1, -1, 0, 0, 0o100644], [1, 2.0, 0, 0, 0o100644], [1, 1 << 64, 0, 0, 0o100644],
    [1, 2, 0, 0, 33188.0], [1, 2, "0", 0, 0o100644], [1, 2, [0], 0, 0o100644],
], ids=repr)
def test_a_row_of_a_damaged_stat_is_listed_afresh(tmp_path, two_videos, stat):
    """A row whose stat no record holds (out of 64 bits, not an int) is not of a row's shape:
    its file is stat'ed as a cold listing does, the rest of the index still read."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    document, rows = read_rows(index)
    root = rows["c/c_000.mp4"][0].removesuffix("c/c_000.mp4")
    rows["c/c_000.mp4"][4] = stat
    write_rows(index, document, rows)
    assert read_index(index, MediaLimits()).listed(root, MediaLimits()).rel_paths == ["c/c_001.mp4"]
    found = warm_scan(two_videos, index)
    assert [found.probes.result(v.rel_path).num_frames for v in found.listed] == [28, 32]
    assert _outcome(found)[1] == []
    first = found.listed[0]
    assert first.identity == (os.stat(first.path).st_dev, os.stat(first.path).st_ino)


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's owner filter")
def test_a_file_replaced_since_the_index_is_changed_for_an_owner_who_may_read_it(tmp_path):
    """A new inode in a listed file's place (rsync, an atomic save): the owner filter checks the
    file there now, so one the owner may read is found `changed` by its row's check, and one
    they may not read is refused to them."""
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="warm-rows-"))  # nobody reaches it
    try:
        base.chmod(0o755)
        root = base / "videos"
        make_dataset(root, classes=["c"], videos_per_class=3, num_frames=(24, 40),
                     size=(64, 48), seed=1, gop=12)
        index = tmp_path / "index.json"
        scan_dataset(root, ["mp4"], index_path=index)
        for rel_path, mode in (("c/c_000.mp4", 0o644), ("c/c_001.mp4", 0o600)):
            saved = root / "saved.tmp"
            shutil.copy(root / "c/c_002.mp4", saved)
            saved.chmod(mode)
            os.replace(saved, root / rel_path)
        found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=1,
                                        index_path=index)
        cfg = load_task_config(write_config(tmp_path / "t.yaml", task_config(root)))
        cfg = replace(cfg, access=stamped(cfg.access, NOBODY, NOBODY))
        kept, refused = owner_videos(cfg, owner_of(cfg), found.listed)
        thread.join()
        assert [v.rel_path for v in kept] == ["c/c_000.mp4", "c/c_002.mp4"]
        assert [(b.rel_path, b.reason) for b in refused] == [("c/c_001.mp4", PERMISSION_DENIED)]
        assert found.probes.result("c/c_000.mp4").reason == "changed"
    finally:
        shutil.rmtree(base)


def test_a_listed_row_whose_name_a_new_file_takes_is_no_target(tmp_path, two_videos):
    """c/c_000.mp4 is in the index; c/c_000.avi, added since, sorts first and takes its name:
    the row's file is a name collision, and the new file is probed, not taken as answered."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4", "avi"], index_path=index)
    shutil.copy(two_videos / "c" / "c_001.mp4", two_videos / "c" / "c_000.avi")
    found, thread = start_lazy_scan(two_videos, ["mp4", "avi"], stop=threading.Event(),
                                    workers=1, index_path=index)
    thread.join()
    assert [v.rel_path for v in found.listed] == ["c/c_000.avi", "c/c_001.mp4"]
    assert [(b.rel_path, b.reason) for b in found.bad] == [("c/c_000.mp4", "name_collision")]
    probed = found.probes.known("c/c_000.avi")  # the thread is done: never waited for
    assert probed is not None and probed.num_frames == 32


def _emptied(path: Path) -> None:
    path.write_bytes(b"")


def _chmodded(path: Path) -> None:
    path.chmod(0o600)


def _replaced(path: Path) -> None:
    saved = path.with_suffix(".tmp")
    shutil.copy(path, saved)
    os.replace(saved, path)


def _linked_out(path: Path) -> None:
    outside = path.parent.parent.parent / "outside.mp4"
    shutil.copy(path, outside)
    path.unlink()
    path.symlink_to(outside)


def _linked_in(path: Path) -> None:
    path.unlink()
    path.symlink_to("c_001.mp4")


@pytest.mark.parametrize(("change", "reason", "detail"), [
    (lambda p: p.write_bytes(p.read_bytes() + b"\0"), "changed",
     "changed since the scan index: bytes {size} -> {grown}, mtime {mtime} -> "),
    (Path.unlink, "open_invalid", "cannot stat"),
    (_emptied, "open_invalid", "empty file"),
    (_chmodded, "changed", "changed since the scan index: mode {mode} -> 0o100600"),
    (_replaced, "changed", "changed since the scan index: inode ({dev}, {ino}) -> ({dev}, "),
    (_linked_out, "outside_root", "outside the dataset root"),
    (_linked_in, "changed", "a symlink in its place"),
])
def test_a_file_changed_since_the_index_is_found_by_one_stat(tmp_path, two_videos, monkeypatch,
                                                            change, reason, detail):
    """The warm check of a file the listing took from its row: the walk's own reason where
    the walk refuses the file now, else `changed`; its file stat'ed once (a link: its target
    resolved too)."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    # the scan's thread reads no row by itself: this one is read when asked for, below
    monkeypatch.setattr(ProbeBook, "resolve_some", lambda book, count: False)
    found, thread = start_lazy_scan(two_videos, ["mp4"], stop=threading.Event(), workers=1,
                                    index_path=index)
    thread.join()
    target = two_videos / "c" / "c_000.mp4"
    was = target.stat()
    change(target)
    detail = detail.format(size=was.st_size, grown=was.st_size + 1, mtime=was.st_mtime_ns,
                           mode=oct(was.st_mode), dev=was.st_dev, ino=was.st_ino)
    stats, real_stat = [], os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(p) or real_stat(p, *a, **k))
    result = found.probes.result("c/c_000.mp4")
    monkeypatch.setattr(os, "stat", real_stat)
    assert (result.reason, detail in result.detail) == (reason, True), result
    assert sum(os.path.basename(p) == target.name for p in stats) == 1


def test_a_warm_listing_has_the_identity_its_index_recorded_until_a_size_changes(
        tmp_path, two_videos):
    """The scan index records its listing's digest: a warm mount of the same files plans with
    the identity a cold one computes; a file rewritten in place keeps it (listed from its row,
    found `changed` later), and the next listing, by its stat, has a new one."""
    index = tmp_path / "index.json"
    cold = scan_dataset(two_videos, ["mp4"], index_path=index)
    computed = dataset_identity("t", cold.videos).digest
    warm = functools.partial(warm_scan, two_videos, index)

    assert warm().digest == computed == dataset_identity("t", warm().listed).digest
    target = two_videos / "c" / "c_000.mp4"
    target.write_bytes(target.read_bytes() + b"\0")  # another size, its folder unchanged
    assert warm().digest == computed
    found = warm()  # the index forgot the file: listed by its stat
    assert found.digest is None
    assert dataset_identity("t", found.listed).digest != computed
    assert warm().digest == dataset_identity("t", found.listed).digest  # indexed again


@pytest.mark.parametrize("stale", ["no digest", "another identity version"])
def test_an_index_without_the_digest_is_written_again_once_without_probing(
        tmp_path, two_videos, caplog, stale):
    """An index written before it stored its listing's digest, or one of another definition
    of the identity: the first warm mount computes the identity and writes the index again
    from its rows (nothing probed), the next one takes the identity from it."""
    index = tmp_path / "index.json"
    computed = dataset_identity("t", scan_dataset(two_videos, ["mp4"], index_path=index).videos)
    document = read_checked_json(str(index))
    if stale == "no digest":
        del document["listing_digest"], document["identity_version"]
    else:
        document["identity_version"] -= 1  # the digest of an older definition
        document["listing_digest"] = "0" * 64
    write_checked_json(str(index), document)
    warm = functools.partial(warm_scan, two_videos, index)
    with caplog.at_level("INFO", logger="sandfs.media.scan"):
        assert warm().digest is None
    assert "2 usable, 0 bad, 0 probed" in caplog.text
    rewritten = read_checked_json(str(index))
    assert (rewritten["listing_digest"], rewritten["identity_version"]) == (
        computed.digest, IDENTITY_VERSION)
    assert rewritten["rows"] == document["rows"]
    assert warm().digest == computed.digest


def _outcome(found) -> tuple[list[str], list[tuple[str, str]]]:
    return ([v.rel_path for v in found.listed],
            sorted({(b.rel_path, b.reason) for b in [*found.bad, *found.probes.bad()]}))


def test_a_lowered_file_size_limit_refuses_a_row_as_a_cold_listing_does(tmp_path, two_videos):
    """max_file_bytes lowered since the index was written (between two mounts): the row of
    the file now too large is not listed, the walk refuses it by its stat as a cold listing
    does, and the index's digest (of both files) is not the identity."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    assert warm_scan(two_videos, index).digest is not None
    larger = max(two_videos.glob("c/*.mp4"), key=lambda p: p.stat().st_size)
    small = replace(MediaLimits(), max_file_bytes=larger.stat().st_size - 1)
    cold = scan_dataset(two_videos, ["mp4"], limits=small)
    assert [(b.rel_path, b.reason) for b in cold.bad] == [
        (larger.relative_to(two_videos).as_posix(), "too_large")]
    warm = warm_scan(two_videos, index, small)
    assert _outcome(warm) == _outcome(cold)
    assert warm.digest is None
    assert warm_scan(two_videos, index, small).digest == dataset_identity(
        "t", cold.videos).digest  # the index written again without the refused file


@pytest.mark.parametrize("limit", ["max_scan_files", "max_frames"])
def test_other_lowered_limits_apply_to_a_warm_listing(tmp_path, two_videos, limit):
    """The walk's file count limit refuses a warm listing as a cold one; a probe's limit
    changed makes the index's results void (each file probed again, refused the same)."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    small = replace(MediaLimits(), **{limit: 1})
    if limit == "max_scan_files":
        with pytest.raises(ScanTooLarge):
            warm_scan(two_videos, index, small)
        return
    warm = warm_scan(two_videos, index, small)
    assert _outcome(warm) == _outcome(scan_dataset(two_videos, ["mp4"], limits=small))
    assert {reason for _, reason in _outcome(warm)[1]} == {"too_large"}


def test_an_index_of_a_row_a_list_is_read_and_written_again_as_columns(tmp_path, two_videos,
                                                                       caplog):
    """An index of scan version 6 (a list a row, before the columns): its results are
    taken (nothing probed), its files listed by their stat; then it is written as columns."""
    index = tmp_path / "index.json"
    cold = scan_dataset(two_videos, ["mp4"], index_path=index)
    document, rows = read_rows(index)
    old = {k: v for k, v in document.items() if k not in ("rows", "count", "root", "walk")}
    write_checked_json(str(index), {**old, "scan_version": 6, "entries": rows})
    with caplog.at_level("INFO", logger="sandfs.media.scan"):
        found = warm_scan(two_videos, index)
    assert "2 usable, 0 bad, 0 probed" in caplog.text
    assert [found.probes.result(v.rel_path).num_frames for v in found.listed] == [
        v.num_frames for v in cold.videos]
    rewritten = read_checked_json(str(index))
    assert rewritten["scan_version"] == SCAN_VERSION and read_rows(index)[1] == rows


def test_the_stats_are_binary_rows_and_an_index_of_a_list_of_them_is_read(tmp_path, two_videos,
                                                                          caplog):
    """The index stores each file's stat as a binary row (one base64 string: 1.75 million
    ints at 250,000 files took 0.29 s of JSON parsing at each warm start); an index of scan
    version 7, its stats a list of ints, is read (nothing probed) and written again."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    document = read_checked_json(str(index))
    table = np.frombuffer(binascii.a2b_base64(document["rows"]["stat"]), STAT_ROW)
    for rel_path, row in zip(document["rows"]["rel_path"].split("\0"), table, strict=True):
        st = os.stat(two_videos / rel_path)
        assert row.tolist() == (st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_uid,
                                st.st_gid, st.st_mode)
    flat = [field for row in table.tolist() for field in row]
    write_checked_json(str(index), {**document, "scan_version": 7,
                                    "rows": {**document["rows"], "stat": flat}})
    with caplog.at_level("INFO", logger="sandfs.media.scan"):
        found = warm_scan(two_videos, index)
    assert "2 usable, 0 bad, 0 probed" in caplog.text
    assert [found.probes.result(v.rel_path).num_frames for v in found.listed] == [28, 32]
    assert read_checked_json(str(index)) == document  # as the cold scan wrote it


@pytest.mark.parametrize("cut", ["a row short", "not base64"])
def test_an_index_whose_binary_stats_are_damaged_is_ignored(tmp_path, two_videos, cut, caplog):
    """Stats of fewer rows than the index holds, or not base64, in a sound file: the index is
    ignored with a warning and every file probed."""
    index = tmp_path / "index.json"
    scan_dataset(two_videos, ["mp4"], index_path=index)
    document = read_checked_json(str(index))
    stats = document["rows"]["stat"]
    stats = (binascii.b2a_base64(binascii.a2b_base64(stats)[:STAT_ROW.itemsize],
                                 newline=False).decode() if cut == "a row short" else "#" + stats)
    write_checked_json(str(index), {**document, "rows": {**document["rows"], "stat": stats}})
    with caplog.at_level("WARNING", logger="sandfs.media.scan"):
        assert scan_dataset(two_videos, ["mp4"], index_path=index).num_probed == 2
    assert "ignoring the scan index" in caplog.text
