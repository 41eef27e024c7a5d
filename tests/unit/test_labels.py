"""Labels from a CSV file: headers recognized by name, Kinetics files, relative paths with or
without extension and unique file names; what matches nothing is counted, never shifted."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

import pytest

from sandfs.access import Owner
from sandfs.config.loader import load_task_config
from sandfs.errors import UserError
from sandfs.media.scan import scan_dataset
from sandfs.media.types import BadVideo, DatasetScan
from sandfs.plan.labels import match_labels, parse_label_rows, read_labels
from sandfs.plan.mount import other_paths
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import run_cli, task_config, write_config
from tests.helpers.operations import make_service
from tests.helpers.plans import FAKE_DATASET, fake_videos

VIDEOS = fake_videos(6)  # c0/v000, c1/v001, c2/v002, c0/v003, c1/v004, c2/v005


def labels_of(tmp_path, text: str, videos=VIDEOS):
    path = tmp_path / "labels.csv"
    path.write_text(text)
    return match_labels("t0", parse_label_rows(path.read_bytes(), str(path)), videos)


@pytest.mark.parametrize("header", ["video,label", "Video,Label", "VIDEO, label", "path,class",
                                    "file,Class", "id,file,extra,label"])
def test_a_header_is_recognized_by_its_names(tmp_path, header):
    extra = "x," if header.startswith("id") else ""
    tail = ",y,dog" if header.startswith("id") else ",dog"
    text = f"{header}\n{extra}c0/v000.mp4{tail}\n{extra}c1/v001{tail.replace('dog', 'cat')}\n"
    found = labels_of(tmp_path, text)
    assert found.classes == ("cat", "dog")  # never the header's names
    assert found.labels[:2] == ("dog", "cat")


def test_columns_in_another_order(tmp_path):
    found = labels_of(tmp_path, "class,path\ndog,c0/v000\n")
    assert found.labels[0] == "dog" and found.classes == ("dog",)


def test_without_a_header_the_first_two_columns_are_video_and_label(tmp_path):
    found = labels_of(tmp_path, "c0/v000.mp4,dog\nc1/v001,cat\n")
    assert found.labels[:2] == ("dog", "cat") and found.classes == ("cat", "dog")


def test_paths_with_or_without_extension_and_unique_file_names(tmp_path):
    found = labels_of(tmp_path, "video,label\nc0/v000.mp4,a\nc1/v001,b\nv002.mp4,c\nv003,d\n")
    assert found.labels == ("a", "b", "c", "d", None, None)
    assert (found.videos_without_label, found.rows_without_video) == (2, 0)


def test_a_file_name_two_videos_share_names_neither(tmp_path, caplog):
    videos = [*VIDEOS[:2], replace(VIDEOS[0], name="c9/v000", rel_path="c9/v000.mp4")]
    with caplog.at_level(logging.WARNING):
        found = labels_of(tmp_path, "video,label\nv000,a\nc9/v000,b\nnope.mp4,c\n", videos)
    assert found.labels == (None, None, "b")
    assert (found.videos_without_label, found.rows_without_video) == (2, 2)
    assert "task t0: labels: 2 of 3 videos have no label, 2 of 3 rows match no video" in (
        caplog.text)


def test_a_kinetics_csv_names_videos_by_youtube_id_and_times(tmp_path):
    videos = [replace(VIDEOS[0], name="abseiling/-3B32lodo2M_000059_000069",
                      rel_path="abseiling/-3B32lodo2M_000059_000069.mp4"),
              replace(VIDEOS[1], name="zumba/zz_000001_000011",
                      rel_path="zumba/zz_000001_000011.mkv")]
    text = ("label,youtube_id,time_start,time_end,split\n"
            "abseiling,-3B32lodo2M,59,69,train\n"
            "zumba,zz,1,11,train\n"
            "air drumming,gone,0,10,train\n")
    found = labels_of(tmp_path, text, videos)
    assert found.labels == ("abseiling", "zumba")
    assert found.classes == ("abseiling", "air drumming", "zumba")
    assert found.rows_without_video == 1


DAEMON = Owner(os.geteuid(), os.getegid(), frozenset(), 0o400)


def test_an_unreadable_labels_file_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match=r"labels file .*missing\.csv"):
        read_labels(str(tmp_path / "missing.csv"), DAEMON, 1 << 20)
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00video")
    with pytest.raises(UserError, match=r"bin\.csv"):
        parse_label_rows(read_labels(str(tmp_path / "bin.csv"), DAEMON, 1 << 20), "bin.csv")


def test_a_labels_file_is_read_only_when_it_is_a_regular_file_within_the_cap(tmp_path):
    """A FIFO would hang the read and grow memory with what is fed to it; a symlink could be
    swapped to point anywhere; a huge file would be held whole in memory."""
    good = tmp_path / "good.csv"
    good.write_text("video,label\na,x\n")
    assert read_labels(str(good), DAEMON, 1 << 20) == good.read_bytes()
    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "link.csv").symlink_to(good)
    (tmp_path / "linked").symlink_to(tmp_path)
    refusals = {"fifo.csv": "not a regular file", "link.csv": "a symlink",
                "good.csv": "larger than 8 bytes"}
    for name, words in refusals.items():
        cap = 8 if name == "good.csv" else 1 << 20
        with pytest.raises(UserError, match=f"labels file .*{name}: {words}"):
            read_labels(str(tmp_path / name), DAEMON, cap)
    # a symlinked folder above the file is resolved once, then opened through no link
    assert read_labels(str(tmp_path / "linked" / "good.csv"), DAEMON, 1 << 20) == (
        good.read_bytes())


def test_a_plan_reports_its_label_counts(tmp_path):
    (tmp_path / "labels.csv").write_text("Video,Label\nc0/v000,a\nc1/v001.mp4,b\nghost,c\n")
    cfg = task_config(FAKE_DATASET)
    cfg["dataset"]["labels"] = str(tmp_path / "labels.csv")
    plan = TaskPlan(load_task_config(write_config(tmp_path / "t.yaml", cfg), check_paths=False),
                    fake_videos(4), k_epochs=2)
    assert plan.class_names == ["a", "b", "c"]
    assert [plan.label_index(label) for label in plan.labels] == [0, 1, None, None]
    assert plan.label_match.videos_without_label == 2
    assert plan.label_match.rows_without_video == 1
    figures = make_service([plan]).status()["tasks"]["t0"]
    assert (figures["videos_without_label"], figures["label_rows_without_video"]) == (2, 1)


def test_pyslowfast_lines_are_paths_and_class_indexes(tmp_path):
    """PySlowFast's `path label_index` lines: absolute paths or paths under another root
    name a video by their longest tail; the classes are 0..the largest index, so a clip's
    label_index is the file's number (never the place of "10" among sorted strings)."""
    text = ("/data/k400/train/c0/v000.mp4 10\n"
            "c1/v001.mp4 2\n"
            "elsewhere/v002.mp4 0\n"
            "\n")
    found = labels_of(tmp_path, text)
    assert found.labels[:3] == ("10", "2", "0")
    assert found.classes == tuple(str(i) for i in range(11))
    assert [found.classes.index(label) for label in found.labels[:3]] == [10, 2, 0]


@pytest.mark.parametrize(("text", "error"), [
    ("", "no labelled row"),
    ("\n\n", "no labelled row"),
    ("video,label\n", "no labelled row"),
    ("c0/v000.mp4 1\nc1/v001.mp4 dog\n", r"labels\.csv:2: expected `path label_index`"),
    ("c0/v000.mp4 1\nc1/v001.mp4 1 extra\n", r"labels\.csv:2:"),
    ("ghost/a.mp4 1\nghost/b.mp4 2\n", "none of the 2 rows names a video of the task"),
    ("video,label\nnope,dog\n", "none of the 1 rows names a video"),
])
def test_a_file_that_labels_nothing_is_an_error(tmp_path, text, error):
    with pytest.raises(UserError, match=error):
        labels_of(tmp_path, text)


def test_a_mount_with_a_labels_file_that_labels_nothing_fails(tmp_path, dataset_dir):
    """Through the command a user runs: `sandfs plan` plans as the mount does."""
    (tmp_path / "train.csv").write_text("/other/root/x.mp4 0\n/other/root/y.mp4 1\n")
    cfg = task_config(dataset_dir)
    cfg["dataset"]["labels"] = str(tmp_path / "train.csv")
    done = run_cli("plan", "--config", str(write_config(tmp_path / "t.yaml", cfg)))
    assert done.returncode == 1
    assert "none of the 2 rows names a video of the task" in done.stderr


def test_pyslowfast_labels_reach_the_views(tmp_path, dataset_dir):
    lines = [f"/k400/train/{p.relative_to(dataset_dir)} {i % 3 + 5}"
             for i, p in enumerate(sorted(dataset_dir.rglob("*.mp4")))]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    cfg = task_config(dataset_dir)
    cfg["dataset"]["labels"] = str(tmp_path / "train.csv")
    done = run_cli("plan", "--config", str(write_config(tmp_path / "t.yaml", cfg)), "--json")
    assert done.returncode == 0, done.stderr
    cfg = load_task_config(tmp_path / "t.yaml")
    videos = scan_dataset(cfg.dataset.video_dataset_path, cfg.dataset.extensions).videos
    plan = TaskPlan(cfg, videos, k_epochs=2)
    assert plan.class_names == [str(i) for i in range(8)]
    assert sorted({plan.label_index(label) for label in plan.labels}) == [5, 6, 7]
    assert plan.label_match.videos_without_label == 0


def test_dirname_classes_count_the_folders_of_files_a_task_does_not_place(tmp_path):
    """The classes of a task whose owner reads some videos (or with files left out) are
    those of every file of the scan: each label indexes the same class for every task."""
    videos = fake_videos(6)  # folders c0, c1, c2
    found = DatasetScan("/nowhere", tuple(videos), (BadVideo("d/bad.mp4", "not_a_video"),))
    cfg = load_task_config(write_config(tmp_path / "t.yaml", task_config(FAKE_DATASET)),
                           check_paths=False)
    some = tuple(v for v in videos if v.rel_path.startswith("c1/"))  # an owner's
    plan = TaskPlan(cfg, some, k_epochs=2, other_rel_paths=other_paths(found, some))
    assert plan.class_names == ["c0", "c1", "c2", "d"]
    assert [plan.label_index(label) for label in plan.labels] == [1, 1]
    assert other_paths(found, found.videos) == ["d/bad.mp4"]  # its own placed: split once
