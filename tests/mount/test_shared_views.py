"""Views that several tasks share (identical pipelines: the same objects) are one inode: the
kernel's page cache serves the second task, and each task still sees its own metadata and
counts."""

from __future__ import annotations

import fcntl
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sandfs.reading import open_view, read_view, sole_reader
from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.pagecache import cached_pages, wait_uncached

TRIALS = ("trial0", "trial1", "trial2")


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def status(mounted) -> dict:
    return json.loads(read(mounted.path(".sand", "status.json")))


def test_identical_tasks_share_inodes_and_keep_their_own_metadata(tmp_path, dataset_dir):
    paths = [write_config(tmp_path / f"{t}.yaml", task_config(dataset_dir, task=t))
             for t in TRIALS]
    other = write_config(tmp_path / "other.yaml", task_config(dataset_dir, task="other", seed=7))
    with mount_sandfs(tmp_path, [*paths, other]) as m:
        views = [(e, i) for e in range(3) for i in range(3)]
        for epoch, iteration in views:
            inodes = {os.stat(m.path(t, str(epoch), str(iteration), "view")).st_ino
                      for t in TRIALS}
            assert len(inodes) == 1, "one object, one inode"
            assert os.stat(m.path("other", str(epoch), str(iteration), "view")).st_ino \
                not in inodes
        # the trials read in step from threads of one process, as DataLoader workers would
        with ThreadPoolExecutor(len(TRIALS)) as pool:
            results = list(pool.map(
                lambda t: [read(m.path(t, str(e), str(i), "view")) for e, i in views], TRIALS))
        assert results[0] == results[1] == results[2]
        for task in TRIALS:
            for epoch, iteration in views:
                path = m.path(task, str(epoch), str(iteration), "view")
                meta = json.loads(os.getxattr(path, "user.sand.meta"))
                assert (meta["task"], meta["epoch"], meta["iteration"]) == (task, epoch,
                                                                            iteration)
        figures = status(m)
        for task in TRIALS:  # page-cache reads count as served, and move the task along
            assert figures["tasks"][task]["views_served"] == len(views)
            assert (figures["tasks"][task]["epoch"], figures["tasks"][task]["iteration"]) \
                == (2, 2)
        assert figures["views_materialized"] <= 2 * len(views)  # trials once, other once


def test_the_mount_reads_in_large_requests(mounted):
    """As root the daemon widens the mount's readahead window to 1 MiB (FUSE's largest read
    request); the kernel's default is 128 KiB."""
    if os.getuid() != 0:
        pytest.skip("only root may set a mount's readahead (the mount works the same without)")
    device = os.stat(mounted.mountpoint).st_dev
    setting = f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb"
    with open(setting) as f:
        assert int(f.read()) == 1024


def test_a_view_leaves_the_page_cache_once_every_task_has_read_it(tmp_path, dataset_dir):
    """A shared view stays in the kernel's page cache for the trials still to read it; once
    every trial has, its pages are dropped (kept, the page cache grew by a batch per read and
    each read of a new view got slower)."""
    paths = [write_config(tmp_path / f"{t}.yaml", task_config(dataset_dir, task=t))
             for t in TRIALS]
    with mount_sandfs(tmp_path, paths) as m:
        views = [m.path(t, "0", "1", "view") for t in TRIALS]
        expected = read(views[0])
        for path in views[1:]:
            assert cached_pages(path) > 0  # the next trial reads it from the page cache
            assert read(path) == expected
        assert wait_uncached(views[0]) == 0
        assert read(views[0]) == expected  # read again: served again, the same bytes


def test_a_task_s_views_leave_the_page_cache_once_read(mounted):
    path = mounted.path("t0", "0", "0", "view")
    data = read(path)
    assert wait_uncached(path) == 0
    assert read(path) == data


def test_a_view_says_how_many_tasks_read_it_and_is_read_past_the_page_cache_by_one(
        tmp_path, dataset_dir):
    """`user.sand.readers`: the trials' shared views have three readers, another seed's one.
    `sandfs.reading` opens a view with one reader O_DIRECT (the daemon's reply lands in the
    reader's array, no page-cache copy) and a shared one through the page cache, which then
    serves the next trial."""
    paths = [write_config(tmp_path / f"{t}.yaml", task_config(dataset_dir, task=t))
             for t in TRIALS]
    other = write_config(tmp_path / "other.yaml", task_config(dataset_dir, task="other", seed=7))
    with mount_sandfs(tmp_path, [*paths, other]) as m:
        trial_views = [m.path(t, "1", "2", "view") for t in TRIALS]
        own_view = m.path("other", "1", "2", "view")
        assert [os.getxattr(p, "user.sand.readers") for p in trial_views] == [b"3"] * 3
        assert os.getxattr(own_view, "user.sand.readers") == b"1"
        assert sole_reader(own_view) and not sole_reader(trial_views[0])
        whole = read(own_view)
        for path, direct in ((own_view, True), (trial_views[0], False)):
            fd = open_view(path, sole_reader(path))
            try:
                assert bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT) == direct
                if direct:  # any offset and size, into an unaligned buffer
                    assert os.pread(fd, 777, 12345) == whole[12345:13122]
            finally:
                os.close(fd)
        assert np.array_equal(read_view(own_view), np.load(own_view))
        first = read_view(trial_views[0])
        assert cached_pages(trial_views[1]) > 0  # the next trial reads it from the page cache
        assert np.array_equal(read_view(trial_views[1]), first)
        assert np.array_equal(read_view(trial_views[2]), first)
