"""Who may read what: the stat-bit access check, task owners and their modes, the `access:`
section of a config, and probe results that must not outlive a permission change."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from sandfs.access import (
    AccessCheck,
    Owner,
    allowed,
    check_owner_paths,
    owner_of,
    owner_videos,
    stamped,
)
from sandfs.config.loader import load_task_config
from sandfs.config.yamlsafe import ConfigError
from sandfs.errors import UserError
from sandfs.media.scan_index import _is_lasting
from sandfs.media.types import ProbeFailure, VideoInfo

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the owner rules differ for a daemon "
                               "that is not root")


def stat_of(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize(("mode", "file_uid", "file_gid", "want", "expected"), [
    (0o100600, 0, 0, 4, False),  # another user's 0600 file
    (0o100640, 1000, 0, 4, True),  # the owner's
    (0o100040, 2000, 7, 4, True),  # through a group of the user's
    (0o100400, 2000, 7, 4, False),  # the owner's bits are not the group's
    (0o100404, 2000, 9, 4, True),  # through "other"
    (0o040711, 2000, 9, 5, False),  # a folder one may enter but not list
    (0o040711, 2000, 9, 1, True),
])
def test_the_check_follows_the_mode_bits(mode, file_uid, file_gid, want, expected):
    st = stat_of(mode, uid=file_uid, gid=file_gid)
    assert allowed(st, 1000, frozenset({7}), want) is expected


def test_root_reads_all_and_an_acl_grants_only_through_the_owner_bits():
    assert allowed(stat_of(0o100000), 0, frozenset(), 4)
    assert allowed(stat_of(0o100444, uid=1), 2, frozenset(), 4)
    assert not allowed(stat_of(0o100444, uid=1), 2, frozenset(), 4, has_acl=True)
    assert allowed(stat_of(0o100400, uid=2), 2, frozenset(), 4, has_acl=True)


@pytest.fixture
def tree():
    """/tmp/X (0755)/data: a/open.mp4 0644, a/closed.mp4 0600, hidden/ 0700, enter_only/ 0711"""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    data = base / "data"
    for rel, mode in (("a/open.mp4", 0o644), ("a/closed.mp4", 0o600),
                      ("hidden/x.mp4", 0o644), ("hidden/y.mp4", 0o644),
                      ("enter_only/z.mp4", 0o644)):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(b"v")
        (data / rel).chmod(mode)
    (data / "hidden").chmod(0o700)
    (data / "enter_only").chmod(0o711)
    yield data
    shutil.rmtree(base)


@ROOT_ONLY
def test_a_video_counts_as_readable_only_where_its_name_is_visible_too(tree):
    check = AccessCheck(Owner(NOBODY, NOBODY, frozenset({NOBODY}), 0o400))
    root = str(tree)
    assert check.blocked_at(root, f"{root}/a/open.mp4") is None
    assert check.blocked_at(root, f"{root}/a/closed.mp4") == "a/closed.mp4"
    assert check.blocked_at(root, f"{root}/hidden/x.mp4") == "hidden"
    assert check.blocked_at(root, f"{root}/enter_only/z.mp4") == "enter_only"
    tree.parent.chmod(0o700)  # a folder above the dataset
    assert AccessCheck(check.owner).blocked_at(root, f"{root}/a/open.mp4") == "."
    assert AccessCheck(replace(check.owner, uid=0)).blocked_at(root, f"{root}/a/open.mp4") is None


def task_cfg(tmp_path, access: dict | None = None, dataset: str = "/data"):
    config = {"task": "t", "seed": 0, "epochs": 1,
              "dataset": {"tag": "x", "input_source": "file", "video_dataset_path": dataset,
                          "sampling": {"videos_per_batch": 1, "frames_per_video": 1},
                          "augmentation": [{"name": "r", "branch_type": "single",
                                            "inputs": ["frame"], "outputs": ["o"],
                                            "config": [{"resize": {"shape": [8, 8]}}]}]}}
    if access is not None:
        config["access"] = access
    return load_task_config(tmp_path / "t.yaml", text=yaml.safe_dump(config), check_paths=False)


def by(cfg, uid: int, gid: int):
    return replace(cfg, access=stamped(cfg.access, uid, gid))


@ROOT_ONLY
def test_owners_and_modes(tmp_path):
    assert owner_of(task_cfg(tmp_path)) == Owner(0, 0, frozenset({0}), 0o400)
    mine = owner_of(by(task_cfg(tmp_path), NOBODY, NOBODY))
    assert (mine.uid, mine.gid, mine.file_mode, mine.dir_mode) == (NOBODY, NOBODY, 0o400, 0o500)
    shared = owner_of(task_cfg(tmp_path, {"owner": "nobody", "group": 0}))
    assert (shared.uid, shared.gid, shared.file_mode, shared.dir_mode) == (
        NOBODY, 0, 0o440, 0o550)
    assert owner_of(task_cfg(tmp_path, {"mode": "0444"})).dir_mode == 0o555
    with pytest.raises(UserError, match="only root may give a task another owner"):
        owner_of(by(task_cfg(tmp_path, {"owner": 0}), NOBODY, NOBODY))
    with pytest.raises(UserError, match="only root may give a task another group"):
        owner_of(by(task_cfg(tmp_path, {"group": 0}), NOBODY, NOBODY))


@ROOT_ONLY
def test_unreadable_videos_are_left_out_by_name_or_by_folder(tmp_path, tree):
    def video(rel: str) -> VideoInfo:
        return VideoInfo(rel.rsplit(".", 1)[0], rel, str(tree / rel), 1, 0, 8, 8, 1, ())

    videos = [video(r) for r in ("a/open.mp4", "a/closed.mp4", "hidden/x.mp4",
                                 "hidden/y.mp4", "enter_only/z.mp4")]
    cfg = by(task_cfg(tmp_path, dataset=str(tree)), NOBODY, NOBODY)
    kept, refused = owner_videos(cfg, owner_of(cfg), videos)
    assert [v.rel_path for v in kept] == ["a/open.mp4"]
    assert [(b.rel_path, b.reason, b.detail) for b in refused] == [
        ("a/closed.mp4", "permission_denied", "the task's owner (uid 65534) cannot read it"),
        ("enter_only", "permission_denied",
         "1 videos in a folder the task's owner (uid 65534) cannot list"),
        ("hidden", "permission_denied",
         "2 videos in a folder the task's owner (uid 65534) cannot list")]
    assert owner_videos(task_cfg(tmp_path, dataset=str(tree)), owner_of(task_cfg(tmp_path)),
                        videos)[0] is videos  # root's task: all, the same sequence
    with pytest.raises(UserError, match=r"may read none of the videos in"):
        owner_videos(cfg, owner_of(cfg), videos[2:4])


@pytest.mark.parametrize(("access", "message"), [
    ({"mode": 440}, "write it in quotes: '0440'"),
    ({"mode": "0644"}, "only read bits are allowed"),
    ({"mode": "0044"}, "the owner's included"),
    ({"mode": "rw"}, "an octal mode like '0440'"),
    ({"owner": "no-such-user-here"}, "unknown user 'no-such-user-here'"),
    ({"group": -1}, "must be at least 0"),
    ({"owners": 0}, "unknown key 'owners'"),
])
def test_bad_access_settings_are_clear_errors(tmp_path, access, message):
    with pytest.raises(ConfigError, match=message):
        task_cfg(tmp_path, access)


def test_a_refused_open_is_probed_again_next_time():
    assert not _is_lasting(ProbeFailure("open_invalid", "PermissionError: Permission denied"))
    assert not _is_lasting(ProbeFailure("open_invalid", "x", lasting=False))
    assert _is_lasting(ProbeFailure("no_video_stream", "no video stream"))


def test_a_daemon_that_is_not_root_serves_only_its_own_users_tasks(tmp_path, tree, monkeypatch):
    monkeypatch.setattr("sandfs.access.daemon_uid", lambda: 1000)
    cfg = task_cfg(tmp_path, dataset=str(tree))
    assert owner_of(cfg).uid == 1000
    with pytest.raises(UserError, match="only root may give a task another owner"):
        owner_of(task_cfg(tmp_path, {"owner": 0}))
    with pytest.raises(UserError, match="the daemon runs as uid 1000, not root"):
        owner_of(by(cfg, 0, 0))  # root wrote it, but this daemon cannot serve root's tasks
    videos = [VideoInfo("a/closed", "a/closed.mp4", str(tree / "a/closed.mp4"), 1, 0, 8, 8, 1,
                        ())]
    assert owner_videos(cfg, owner_of(cfg), videos) == (videos, ())  # the OS checked the scan


@ROOT_ONLY
def test_a_task_of_another_owner_names_only_paths_they_may_read(tmp_path, tree):
    cfg = by(task_cfg(tmp_path, dataset=str(tree / "hidden")), NOBODY, NOBODY)
    with pytest.raises(UserError, match=f"may not list {tree / 'hidden'}$"):
        check_owner_paths(cfg, owner_of(cfg))
    check_owner_paths(replace(cfg, dataset=replace(cfg.dataset, video_dataset_path=str(tree))),
                      owner_of(cfg))
    (tree / "hidden" / "x.csv").write_text("a,b\n")
    for missing in ("x.csv", "no-such.csv"):  # the same words whether it exists or not
        labelled = replace(cfg, dataset=replace(cfg.dataset, video_dataset_path=str(tree),
                                                labels=str(tree / "hidden" / missing)))
        with pytest.raises(UserError, match=f"may not read {tree / 'hidden' / missing}$"):
            check_owner_paths(labelled, owner_of(cfg))
