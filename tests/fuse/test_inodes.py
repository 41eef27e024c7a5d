"""Inode entries live as long as the kernel holds them: every lookup (or listed entry) counts,
FUSE `forget` takes the counts back and frees the entry at zero, and a name looked up again
after that is derived anew, with a fresh number and the same attributes and bytes."""

from __future__ import annotations

import errno

import pyfuse3

from tests.helpers.operations import CTX, Listing, errno_of

FIELDS = ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink")


def same_attributes(a: pyfuse3.EntryAttributes, b: pyfuse3.EntryAttributes) -> bool:
    return all(getattr(a, name) == getattr(b, name) for name in FIELDS)


async def test_a_forgotten_entry_is_freed_and_derived_again(fs, expected_view):
    ops = fs.ops
    epoch = await fs.inode("t0/1")
    known = len(ops.inodes)
    first = await ops.lookup(epoch, b"2", CTX)
    view = await ops.lookup(first.st_ino, b"view", CTX)
    assert len(ops.inodes) == known + 2

    await ops.forget([(view.st_ino, 1), (first.st_ino, 1)])
    assert len(ops.inodes) == known
    assert await errno_of(ops.getattr(first.st_ino, CTX)) == errno.ENOENT

    again = await ops.lookup(epoch, b"2", CTX)
    view_again = await ops.lookup(again.st_ino, b"view", CTX)
    assert again.st_ino not in (first.st_ino, view.st_ino)  # numbers are never reused
    assert same_attributes(again, first) and same_attributes(view_again, view)
    assert await fs.read("t0/1/2/view") == expected_view(1, 2)


async def test_an_entry_stays_while_the_kernel_holds_a_lookup(fs):
    ops = fs.ops
    task = await fs.inode("t0")
    first = await ops.lookup(task, b"0", CTX)
    assert (await ops.lookup(task, b"0", CTX)).st_ino == first.st_ino
    await ops.forget([(first.st_ino, 1)])  # one of two lookups
    assert (await ops.lookup(task, b"0", CTX)).st_ino == first.st_ino
    await ops.forget([(first.st_ino, 2)])
    assert (await ops.lookup(task, b"0", CTX)).st_ino != first.st_ino


async def test_listed_entries_count_and_an_unsent_one_is_not_kept(fs):
    """readdirplus hands the kernel each entry it takes; the one that did not fit is dropped."""
    ops = fs.ops
    epoch = await fs.inode("t0/0")
    known = len(ops.inodes)
    fh = await ops.opendir(epoch, CTX)
    listing = Listing(room=2)
    await ops.readdir(fh, 0, listing)
    assert [name for name, _, _ in listing.entries] == ["0", "1"]
    assert len(ops.inodes) == known + 2
    await ops.forget([(attr.st_ino, 1) for _, attr, _ in listing.entries])
    assert len(ops.inodes) == known
    await ops.releasedir(fh)


async def test_a_forgotten_task_file_is_found_again(fs):
    inode = await fs.inode(".sand/tasks/t0.yaml")
    size = (await fs.ops.getattr(inode, CTX)).st_size
    await fs.ops.forget([(inode, 1)])
    assert await fs.read(".sand/tasks/t0.yaml") and (await fs.stat(
        ".sand/tasks/t0.yaml")).st_size == size
    assert "t0.yaml" in await fs.listdir(".sand/tasks")
