"""lookup, getattr and readdir on the operations in-process: modes, exact sizes before anything
is materialized, stable inodes, paged listings, and ENOENT for every name outside the plan."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from sandfs.fuse.kernelcache import IMMUTABLE_TIMEOUT
from tests.helpers.operations import CTX, Listing, errno_of


@pytest.fixture
def fs(idle_fs):
    """Names, attributes and listings need no scheduler: these tests never start one, so
    nothing is materialized behind their backs."""
    return idle_fs


async def test_directories_and_files_have_read_only_modes(fs):
    """The mount's own folders and status are readable by all; a task's tree belongs to its
    owner (here the daemon's user) and is readable by the owner only."""
    for path in ("", ".sand"):
        attr = await fs.stat(path)
        assert attr.st_mode == stat.S_IFDIR | 0o555, path
    for path in ("t0", "t0/0", "t0/0/1", "t0/videos", "t0/videos/archery"):
        attr = await fs.stat(path)
        assert attr.st_mode == stat.S_IFDIR | 0o500, path
        assert attr.st_nlink == 2
    tasks = await fs.stat(".sand/tasks")  # task YAMLs are written here, by any user
    assert tasks.st_mode & 0o7777 == (0o1777 if os.getuid() == 0 else 0o755)
    assert (await fs.stat(".sand/status.json")).st_mode == stat.S_IFREG | 0o444
    assert (await fs.stat(".sand/tasks/t0.yaml")).st_mode == stat.S_IFREG | 0o600
    for path in ("t0/0/1/view", "t0/videos/archery/archery_000.mp4",
                 "t0/videos/archery/archery_000/frame0/aug0"):
        attr = await fs.stat(path)
        assert attr.st_mode == stat.S_IFREG | 0o400, path
        assert (attr.st_uid, attr.st_gid) == (os.getuid(), os.getgid())


async def test_view_sizes_are_exact_before_anything_is_materialized(fs, plan, expected_view):
    sizes = {(e, i): (await fs.stat(f"t0/{e}/{i}/view")).st_size
             for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)}
    assert fs.ops.service.stats.get("views_materialized") == 0
    assert await fs.getxattr("t0/2/2/view", "user.sand.state") == b"planned"
    for (epoch, iteration), size in sizes.items():
        assert size == len(expected_view(epoch, iteration)), (epoch, iteration)
    assert (await fs.stat("t0/0/0/view")).st_blocks == (sizes[0, 0] + 511) // 512


async def test_other_file_sizes(fs, dataset_dir, t0_config):
    video = dataset_dir / "juggling" / "juggling_002.mp4"
    assert (await fs.stat("t0/videos/juggling/juggling_002.mp4")).st_size == video.stat().st_size
    aug0 = await fs.stat("t0/videos/juggling/juggling_002/frame1/aug0")
    assert aug0.st_size == 128 + 48 * 64 * 3  # .npy header + one 64x48 RGB frame
    assert (await fs.stat(".sand/tasks/t0.yaml")).st_size == len(t0_config.read_bytes())


async def test_inodes_are_stable_and_distinct(fs):
    paths = ["t0", "t0/0", "t0/1", "t0/0/0", "t0/0/0/view", "t0/1/0/view", "t0/videos"]
    first = [await fs.inode(p) for p in paths]
    assert len(set(first)) == len(paths)
    assert [await fs.inode(p) for p in reversed(paths)] == first[::-1]
    assert (await fs.stat("t0/1/0/view")).st_ino == first[5]


async def test_views_are_cached_by_the_kernel_but_status_is_not(fs):
    assert (await fs.stat("t0/0/0/view")).attr_timeout == IMMUTABLE_TIMEOUT
    for path in (".sand/status.json", "t0/videos/archery/archery_000/frame0/aug0"):
        attr = await fs.stat(path)
        assert attr.attr_timeout == attr.entry_timeout == 0, path


async def test_directories_whose_names_come_and_go_keep_their_attributes_cached(fs):
    """A task's directory is looked up on every path walk (tasks end), but its attributes,
    like those of `.sand` and `.sand/tasks`, stay those of its inode: the kernel's permission
    check on each walk asked for them again. Not `/`'s: a stat of a dead daemon's mountpoint
    must fail, or its stale mount passes for a live one."""
    for path in ("t0", ".sand", ".sand/tasks"):
        attr = await fs.stat(path)
        assert (attr.attr_timeout, attr.entry_timeout) == (IMMUTABLE_TIMEOUT, 0), path
    assert (await fs.stat("")).attr_timeout == 0


async def test_listings(fs):
    assert await fs.listdir("") == [".sand", "t0"]
    assert await fs.listdir(".sand") == ["status.json", "metrics", "tasks"]
    assert await fs.listdir(".sand/tasks") == ["t0.yaml"]
    assert await fs.listdir("t0") == ["videos", "0", "1", "2"]
    assert await fs.listdir("t0/2") == ["0", "1", "2"]  # 12 videos, 4 per batch
    assert await fs.listdir("t0/2/2") == ["view", "meta.json"]
    assert await fs.listdir("t0/videos") == ["archery", "bowling", "juggling"]
    names = await fs.listdir("t0/videos/bowling")
    assert sorted(names) == sorted(f"bowling_{i:03d}{e}" for i in range(4) for e in ("", ".mp4"))
    frames = await fs.listdir("t0/videos/bowling/bowling_000")
    assert frames[:3] == ["frame0", "frame1", "frame2"]
    assert frames == [f"frame{i}" for i in range(len(frames))]


@pytest.mark.parametrize("room", [1, 2, 3])
async def test_a_listing_resumes_where_a_full_buffer_stopped(fs, room):
    assert await fs.listdir("t0", room=room) == ["videos", "0", "1", "2"]


async def test_listed_attributes_match_lookup(fs):
    fh = await fs.ops.opendir(await fs.inode("t0/0/0"), CTX)
    listing = Listing()
    await fs.ops.readdir(fh, 0, listing)
    [(name, attr, next_id), (meta, _, _)] = listing.entries
    assert meta == "meta.json"
    looked_up = await fs.stat("t0/0/0/view")
    assert (name, next_id) == ("view", 1)
    assert (attr.st_ino, attr.st_size, attr.st_mode) == (
        looked_up.st_ino, looked_up.st_size, looked_up.st_mode)


@pytest.mark.parametrize("path", [
    "nope", "t1", "t0/3", "t0/01", "t0/+1", "t0/ 1", "t0/1 ", "t0/1_0", "t0/١", "t0/-1",
    "t0/999999999", "t0/99999999999999999999", "t0/0/3", "t0/0/00", "t0/0/0/views",
    "t0/0/0/view/x", ".sand/nope", ".sand/tasks/t0", ".sand/tasks/t1.yaml", "t0/videos/nope",
    "t0/videos/archery/archery_000/frame01", "t0/videos/archery/archery_000/frame+1",
    "t0/videos/archery/archery_000/frame", "t0/videos/archery/archery_000/frame0/aug01",
    "t0/videos/archery/archery_000/frame0/aug9", "t0/videos/archery/archery_000.mp4/x",
])
async def test_names_outside_the_plan_are_enoent(fs, path):
    parent, _, name = path.rpartition("/")
    parent_inode = await fs.inode(parent)
    assert await errno_of(fs.ops.lookup(parent_inode, os.fsencode(name), CTX)) == errno.ENOENT


async def test_an_unknown_inode_is_enoent_and_a_file_is_not_a_directory(fs):
    assert await errno_of(fs.ops.getattr(10_000, CTX)) == errno.ENOENT
    view = await fs.inode("t0/0/0/view")
    assert await errno_of(fs.ops.opendir(view, CTX)) == errno.ENOTDIR
    assert await errno_of(fs.ops.open(await fs.inode("t0/0"), os.O_RDONLY, CTX)) == errno.EISDIR


async def test_statfs(fs):
    info = await fs.ops.statfs(CTX)
    assert info.f_namemax == 255 and info.f_bsize == 1 << 20
