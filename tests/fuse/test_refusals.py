"""Everything that would change the tree outside .sand/tasks answers EROFS, in-process, and
leaves the tree as it was."""

from __future__ import annotations

import errno
import os
import stat
from types import SimpleNamespace

import pyfuse3
import pytest

from tests.helpers.operations import CTX, errno_of

TRUNCATE = SimpleNamespace(update_size=True)  # the one SetattrFields field the handler reads


def truncated_to(size: int) -> pyfuse3.EntryAttributes:
    attr = pyfuse3.EntryAttributes()
    attr.st_size = size
    return attr


REFUSALS = {  # name -> call(ops, inode of path) for the requests `rm`, `mv`, `cp`... send
    "setxattr": lambda ops, i: ops.setxattr(i["view"], b"user.sand.meta", b"{}", CTX),
    "removexattr": lambda ops, i: ops.removexattr(i["view"], b"user.sand.state", CTX),
    "mknod": lambda ops, i: ops.mknod(i["t0"], b"f", stat.S_IFREG | 0o644, 0, CTX),
    "mkdir": lambda ops, i: ops.mkdir(i["t0"], b"d", 0o755, CTX),
    "mkdir in tasks": lambda ops, i: ops.mkdir(i["tasks"], b"d", 0o755, CTX),
    "rmdir": lambda ops, i: ops.rmdir(i["t0"], b"0", CTX),
    "symlink": lambda ops, i: ops.symlink(i["t0"], b"l", b"/etc/passwd", CTX),
    "rename": lambda ops, i: ops.rename(i["t0"], b"0", i["t0"], b"9", 0, CTX),
    "rename a task file": lambda ops, i: ops.rename(i["tasks"], b"t0.yaml", i["tasks"],
                                                    b"t9.yaml", 0, CTX),
    "link": lambda ops, i: ops.link(i["view"], i["t0"], b"v2", CTX),
    "unlink a view": lambda ops, i: ops.unlink(i["iteration"], b"view", CTX),
    "create in a task": lambda ops, i: ops.create(i["t0"], b"new", 0o644, os.O_WRONLY, CTX),
    "create a task at the root": lambda ops, i: ops.create(
        pyfuse3.ROOT_INODE, b"t9.yaml", 0o644, os.O_WRONLY, CTX),
    "truncate a view": lambda ops, i: ops.setattr(i["view"], truncated_to(0), TRUNCATE, None,
                                                  CTX),
    "truncate a task file": lambda ops, i: ops.setattr(i["yaml"], truncated_to(0), TRUNCATE,
                                                       None, CTX),
}


@pytest.fixture
async def inodes(idle_fs) -> dict[str, int]:
    paths = {"t0": "t0", "iteration": "t0/0/0", "view": "t0/0/0/view", "tasks": ".sand/tasks",
             "yaml": ".sand/tasks/t0.yaml"}
    return {name: await idle_fs.inode(path) for name, path in paths.items()}


@pytest.mark.parametrize("name", REFUSALS)
async def test_changes_to_the_tree_are_erofs(idle_fs, inodes, name):
    before = [await idle_fs.listdir(p) for p in ("", "t0", "t0/0/0", ".sand/tasks")]
    assert await errno_of(REFUSALS[name](idle_fs.ops, inodes)) == errno.EROFS
    assert [await idle_fs.listdir(p) for p in ("", "t0", "t0/0/0", ".sand/tasks")] == before


async def test_writing_to_an_open_view_is_erofs(idle_fs, inodes):
    info = await idle_fs.ops.open(inodes["view"], os.O_RDONLY, CTX)
    assert await errno_of(idle_fs.ops.write(info.fh, 0, b"x")) == errno.EROFS
    await idle_fs.ops.release(info.fh)
