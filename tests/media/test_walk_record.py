"""A warm listing without a walk (docs/contract.md#warm-listing): the scan index keeps what the
walk listed and each folder's stat; while every folder stats the same, its names are listed
again from the index (250,000 files: ~1 s of CPU less), each file still vetted as the walk
vets it; a folder changed since, or one changed as the walk began, is walked again."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from sandfs.fileio import read_checked_json
from sandfs.media import walk
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.synth import make_dataset


@pytest.fixture
def dataset(tmp_path) -> Path:
    """a/a_000.mp4, a/a_001.mp4, b/b_000.mp4, b/b_001.mp4, seeded."""
    root = tmp_path / "videos"
    make_dataset(root, classes=["a", "b"], videos_per_class=2, num_frames=(24, 40),
                 size=(64, 48), seed=1, gop=12)
    return root


@pytest.fixture
def walks(monkeypatch) -> list[str]:
    """The roots walked, each time; folders changed before the walk began are recorded."""
    monkeypatch.setattr(walk, "RECENT_NS", 0)
    walked, fwalk = [], os.fwalk

    def counted(top, *args, **kwargs):
        walked.append(os.fspath(top))
        return fwalk(top, *args, **kwargs)

    monkeypatch.setattr(walk.os, "fwalk", counted)
    return walked


def warm(root: Path, index: Path):
    """A lazy scan with every result read, its thread done."""
    found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=1,
                                    index_path=index)
    found.probes.resolve_all()
    thread.join()
    return found


def outcome(found) -> tuple[list[str], list[tuple[str, str]]]:
    return ([v.rel_path for v in found.listed],
            sorted((b.rel_path, b.reason) for b in [*found.bad, *found.probes.bad()]))


def test_an_unchanged_dataset_is_listed_again_without_a_walk(tmp_path, dataset, walks):
    index = tmp_path / "index.json"
    cold = scan_dataset(dataset, ["mp4"], index_path=index)
    assert len(walks) == 1
    again = warm(dataset, index)
    assert len(walks) == 1  # no second walk
    assert outcome(again) == outcome(cold)
    assert again.listed == cold.listed
    assert [again.probes.result(v.rel_path).num_frames for v in again.listed] == [
        v.num_frames for v in cold.videos]


@pytest.mark.parametrize("change", ["added", "removed", "renamed", "a folder added",
                                    "a folder swapped for a link"])
def test_a_changed_folder_is_walked_again_and_its_record_renewed(tmp_path, dataset, walks,
                                                                 change):
    index = tmp_path / "index.json"
    scan_dataset(dataset, ["mp4"], index_path=index)
    if change == "added":
        shutil.copy(dataset / "b/b_001.mp4", dataset / "b/b_002.mp4")
    elif change == "removed":
        (dataset / "b/b_001.mp4").unlink()
    elif change == "renamed":
        (dataset / "b/b_001.mp4").rename(dataset / "b/b_009.mp4")
    elif change == "a folder added":
        (dataset / "b/c").mkdir()
        shutil.copy(dataset / "b/b_001.mp4", dataset / "b/c/c.mp4")
    else:
        shutil.move(dataset / "b", tmp_path / "b")
        (dataset / "b").symlink_to(tmp_path / "b")
    found = warm(dataset, index)
    assert len(walks) == 2
    expected = {"added": ["b/b_002.mp4"], "removed": [], "renamed": ["b/b_009.mp4"],
                "a folder added": ["b/c/c.mp4"], "a folder swapped for a link": []}[change]
    kept = ["b/b_000.mp4", "b/b_001.mp4"] if change in ("added", "a folder added") else (
        ["b/b_000.mp4"] if change in ("removed", "renamed") else [])
    assert outcome(found) == (sorted(["a/a_000.mp4", "a/a_001.mp4", *kept, *expected]), [])
    # the index is written again with this walk's record: the next listing needs no walk
    assert outcome(warm(dataset, index)) == outcome(found) and len(walks) == 2


def test_a_folder_changed_as_the_walk_began_is_walked_again(tmp_path, dataset, monkeypatch):
    """A name added within the tick of the folder's clock the walk saw would keep its ctime:
    a walk that found a folder changed within RECENT_NS of its start records nothing."""
    index = tmp_path / "index.json"
    scan_dataset(dataset, ["mp4"], index_path=index)
    assert "walk" not in read_checked_json(str(index))  # the dataset was made just now
    monkeypatch.setattr(walk, "RECENT_NS", 0)
    os.utime(dataset / "a", ns=(0, 0))  # an mtime alone: no ctime recorded before it
    scan_dataset(dataset, ["mp4"], index_path=index)
    assert read_checked_json(str(index))["walk"]["files"] == 4


def test_a_file_changed_in_its_unchanged_folder_is_vetted_as_the_walk_does(tmp_path, dataset,
                                                                          walks):
    """A folder's stat does not change with its files' content: a file listed again is
    vetted as the walk vets it: an empty file filled since is listed and probed; a video's
    row is listed and its file checked when the row is read (as after a walk): one emptied
    or rewritten in place since is found bad, its slots kept."""
    index = tmp_path / "index.json"
    (dataset / "a/empty.mp4").touch()
    cold = scan_dataset(dataset, ["mp4"], index_path=index)
    assert ("a/empty.mp4", "open_invalid") in outcome(cold)[1]
    (dataset / "a/empty.mp4").write_bytes((dataset / "b/b_000.mp4").read_bytes())
    (dataset / "a/a_001.mp4").write_bytes(b"")
    with open(dataset / "b/b_001.mp4", "ab") as tail:
        tail.write(b"\0" * 16)
    found = warm(dataset, index)
    assert len(walks) == 1
    assert outcome(found) == (
        ["a/a_000.mp4", "a/a_001.mp4", "a/empty.mp4", "b/b_000.mp4", "b/b_001.mp4"],
        [("a/a_001.mp4", "open_invalid"), ("b/b_001.mp4", "changed")])
    assert found.probes.result("a/empty.mp4").num_frames == cold.videos[2].num_frames




@pytest.mark.parametrize("names", ["ordered apart from their paths", "claimed twice"])
def test_names_listed_again_keep_the_walk_s_order_and_claims(tmp_path, dataset, walks, names):
    """The listing places videos by name, where "a/a.mp4" comes before "a/a-b.mp4" though
    its rel_path sorts after; a name two files claim refuses the later one. Listed again,
    the order and the refusals are the walk's."""
    index = tmp_path / "index.json"
    if names == "claimed twice":
        shutil.copy(dataset / "b/b_000.mp4", dataset / "b/b_000.MP4")
    else:
        shutil.copy(dataset / "a/a_000.mp4", dataset / "a/a.mp4")
        shutil.copy(dataset / "a/a_001.mp4", dataset / "a/a-b.mp4")
    cold = scan_dataset(dataset, ["mp4"], index_path=index)
    listed = [v.name for v in cold.listed]
    assert listed == sorted(listed)
    again = warm(dataset, index)
    assert len(walks) == 1
    assert [v.name for v in again.listed] == listed
    assert outcome(again) == outcome(cold)
    if names == "claimed twice":
        assert ("b/b_000.mp4", "name_collision") in outcome(again)[1]
    else:
        assert listed[:2] == ["a/a", "a/a-b"]
