"""Opening what a task names, in process: through no symlink, checked on the descriptor
(`sandfs.openat`, `opening`), a walk that stays on the dataset's filesystem and gives up past a
file cap (`scan`), and the scans a live mount keeps (`datasets.ScanBook`)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from sandfs import openat
from sandfs.errors import UserError
from sandfs.media.datasets import ScanBook, index_path
from sandfs.media.decode import DecodeError, decode_frames
from sandfs.media.opening import FileReplacedError, open_regular_file
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import make_dataset, write_test_video
from sandfs.media.types import MediaLimits
from sandfs.media.walk import ScanTooLarge
from sandfs.placement import check_dataset_place, resolve_outside_mounts


@pytest.fixture(params=["openat2", "walk"])
def opener(request, monkeypatch):
    """Each test once with the kernel's openat2 and once with the walk used without it."""
    monkeypatch.setattr(openat, "_openat2_missing", request.param == "walk")
    return request.param


def test_no_symlink_is_followed_anywhere_in_the_path(tmp_path, opener):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"mine")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "last").symlink_to(tmp_path / "real" / "f")
    fd = openat.open_no_symlinks(str(tmp_path / "real" / "f"), os.O_RDONLY)
    assert os.read(fd, 8) == b"mine"
    os.close(fd)
    for path in ("link/f", "real/last"):
        with pytest.raises(OSError) as caught:
            openat.open_no_symlinks(str(tmp_path / path), os.O_RDONLY)
        assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError) as caught:
        openat.open_no_symlinks("real/f", os.O_RDONLY)
    assert caught.value.errno == errno.EINVAL


def test_a_video_whose_folder_was_swapped_after_the_scan_is_not_decoded(tmp_path, opener):
    """The decoy and the other video agree in size, mtime, frame count and frame size: only
    the file's identity tells them apart."""
    make_dataset(tmp_path / "ds", classes=["cls"], videos_per_class=1, num_frames=(24, 24))
    other = tmp_path / "other" / "cls"
    other.mkdir(parents=True)
    original = tmp_path / "ds" / "cls" / "cls_000.mp4"
    (other / "cls_000.mp4").write_bytes(original.read_bytes())
    mtime_ns = original.stat().st_mtime_ns
    os.utime(other / "cls_000.mp4", ns=(mtime_ns, mtime_ns))
    info = scan_dataset(tmp_path / "ds", [".mp4"], workers=1).videos[0]
    assert decode_frames(info, [0]).frames
    os.rename(tmp_path / "ds" / "cls", tmp_path / "ds" / "cls.real")
    (tmp_path / "ds" / "cls").symlink_to(other)
    with pytest.raises(DecodeError, match=r"symbolic links|Not a directory"):
        decode_frames(info, [0])
    os.unlink(tmp_path / "ds" / "cls")
    os.rename(other, tmp_path / "ds" / "cls")  # a real folder, another file in it
    with pytest.raises(DecodeError, match="not the file the scan found"):
        decode_frames(info, [0])
    with pytest.raises(FileReplacedError), open_regular_file(info.path, info.identity):
        pass


def test_a_video_whose_mode_changed_since_the_scan_is_not_decoded(tmp_path):
    """Who may read it was decided from the mode the scan saw; a chmod, which keeps the size
    and the mtime, takes effect at the next decode."""
    make_dataset(tmp_path / "ds", classes=["cls"], videos_per_class=1, num_frames=(8, 8))
    info = scan_dataset(tmp_path / "ds", [".mp4"], workers=1).videos[0]
    assert decode_frames(info, [0]).frames
    os.chmod(info.path, 0o600)
    with pytest.raises(DecodeError, match="owner, group or mode changed since the dataset scan"):
        decode_frames(info, [0])


def test_the_walk_stays_on_the_datasets_filesystem(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    make_dataset(tmp_path / "ds", classes=["a"], videos_per_class=1, num_frames=(8, 8))
    inner = tmp_path / "ds" / "mounted"
    inner.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "sandfs-test", str(inner)], check=True)
    try:
        write_test_video(inner / "hidden.mp4", num_frames=8, width=64, height=48)
        found = scan_dataset(tmp_path / "ds", [".mp4"], workers=1)
    finally:
        subprocess.run(["umount", str(inner)], check=True)
    assert [v.rel_path for v in found.videos] == ["a/a_000.mp4"]


def test_a_walk_gives_up_past_its_file_cap(tmp_path):
    make_dataset(tmp_path / "ds", classes=["a"], videos_per_class=1, num_frames=(8, 8))
    for n in range(3):
        (tmp_path / "ds" / f"note{n}.txt").write_text("x")  # every file counts
    with pytest.raises(ScanTooLarge, match="more than max_scan_files=3 files"):
        scan_dataset(tmp_path / "ds", [".mp4"], workers=1, limits=MediaLimits(max_scan_files=3))
    assert len(scan_dataset(tmp_path / "ds", [".mp4"], workers=1,
                            limits=MediaLimits(max_scan_files=4)).videos) == 1


def test_a_path_into_a_sandfs_mount_is_refused_before_it_is_touched(tmp_path):
    (tmp_path / "link").symlink_to("/mnt-of-sandfs/t0")
    assert resolve_outside_mounts(str(tmp_path / "x" / ".." / "link"), []) == (
        "/mnt-of-sandfs/t0")
    for path in ("/mnt-of-sandfs/t0", str(tmp_path / "link"), str(tmp_path / "link" / "a")):
        with pytest.raises(UserError, match=f"{path} lies in the sandfs mount /mnt-of-sandfs"):
            resolve_outside_mounts(path, ["/mnt-of-sandfs"])


def test_a_dataset_may_not_hold_or_lie_in_the_cache_dir_but_its_remote_copies(tmp_path):
    cache = tmp_path / "cache"
    for dataset in (tmp_path, cache, cache / "objects"):
        with pytest.raises(UserError, match="holds or lies in the cache dir"):
            check_dataset_place(str(dataset), str(cache))
    check_dataset_place(str(cache / "remote" / "1ff9541954e1c8e2"), str(cache))
    check_dataset_place(str(tmp_path / "data"), str(cache))


def test_scans_no_task_uses_are_forgotten_and_each_user_holds_a_bounded_number(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("a", "b", "c"):
        make_dataset(tmp_path / name, classes=["x"], videos_per_class=1, num_frames=(8, 8))
    keys = {name: (str(tmp_path / name), (".mp4",)) for name in "abc"}
    book = ScanBook({}, str(cache), 1, MediaLimits(max_scans_per_owner=1))
    in_use: set = set()
    with book.held(keys["a"], 1000, lambda: in_use, privileged=False) as found:
        assert len(found.videos) == 1
    assert keys["a"] in book and os.path.exists(index_path(str(cache), keys["a"]))
    in_use.add(keys["a"])  # a task of uid 1000 reads it: a second scan is one too many
    with pytest.raises(UserError, match="already holds 1 dataset scans"), \
            book.held(keys["b"], 1000, lambda: in_use, privileged=False):
        pass
    with book.held(keys["b"], 0, lambda: in_use, privileged=True):  # root is not counted
        pass
    in_use.clear()  # the task was removed: its scan and index go with the next scan
    with book.held(keys["c"], 1000, lambda: in_use, privileged=False):
        assert keys["a"] not in book and keys["b"] not in book
    assert sorted(p.name for p in Path(cache).iterdir()) == [
        os.path.basename(index_path(str(cache), keys["c"]))]
