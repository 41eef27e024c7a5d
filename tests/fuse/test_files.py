"""open, read, flush and release on the operations in-process: views equal to the reference
oracle at any read size, source videos and frames, status.json, handles, and extended
attributes (ENODATA for names that are not there)."""

from __future__ import annotations

import copy
import errno
import gc
import io
import json
import os
import random
import weakref

import numpy as np
import pyfuse3
import pytest
import trio

from sandfs.media.decode import decode_all_reference
from sandfs.media.synth import read_painted_index
from sandfs.sched.flights import ObjectFailed
from tests.helpers.operations import CTX, errno_of

XATTRS = {b"user.sand.meta", b"user.sand.labels", b"user.sand.state"}
VIEW_XATTRS = XATTRS | {b"user.sand.readers"}


async def test_every_view_equals_the_reference(fs, plan, expected_view):
    for epoch in range(plan.epochs):
        for iteration in range(plan.iterations_per_epoch):
            path = f"t0/{epoch}/{iteration}/view"
            got = await fs.read(path)
            assert got == expected_view(epoch, iteration), path
            assert (await fs.stat(path)).st_size == len(got)


@pytest.mark.parametrize("seed", [0, 1])
async def test_reads_at_random_offsets_and_sizes(fs, expected_view, seed):
    expected = expected_view(1, 2)
    info = await fs.ops.open(await fs.inode("t0/1/2/view"), os.O_RDONLY, CTX)
    rng = random.Random(seed)
    for _ in range(40):
        offset = rng.randrange(len(expected) + 10)
        size = rng.choice([1, 7, 4096, 65536, len(expected) * 2])
        got = bytes(await fs.ops.read(info.fh, offset, size))
        assert got == expected[offset : offset + size], (offset, size)
    await fs.ops.release(info.fh)


async def test_a_view_handle_opened_by_many_readers_materializes_once(fs, expected_view):
    info = await fs.ops.open(await fs.inode("t0/0/1/view"), os.O_RDONLY, CTX)
    results: list[bytes] = []

    async def reader() -> None:
        results.append(bytes(await fs.ops.read(info.fh, 0, 1 << 30)))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(reader)
    assert results == [expected_view(0, 1)] * 4
    status = json.loads(await fs.read(".sand/status.json"))
    assert status["tasks"]["t0"]["views_served"] == 1
    await fs.ops.release(info.fh)


async def test_views_open_read_only_and_are_kept_in_the_page_cache(fs):
    view = await fs.inode("t0/0/0/view")
    info = await fs.ops.open(view, os.O_RDONLY, CTX)
    assert info.keep_cache and not info.direct_io
    await fs.ops.release(info.fh)
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_APPEND, os.O_RDONLY | os.O_TRUNC):
        assert await errno_of(fs.ops.open(view, flags, CTX)) == errno.EROFS, flags


async def test_opening_a_view_moves_the_tasks_position(fs):
    info = await fs.ops.open(await fs.inode("t0/1/2/view"), os.O_RDONLY, CTX)
    await fs.ops.release(info.fh)
    task = json.loads(await fs.read(".sand/status.json"))["tasks"]["t0"]
    assert (task["epoch"], task["iteration"]) == (1, 2)


async def test_flush_and_release_end_a_handle(fs):
    info = await fs.ops.open(await fs.inode("t0/0/0/view"), os.O_RDONLY, CTX)
    assert await fs.ops.flush(info.fh) is None  # a view has nothing to write back
    await fs.ops.release(info.fh)
    assert await errno_of(fs.ops.read(info.fh, 0, 10)) == errno.EBADF
    await fs.ops.release(info.fh)  # a second release of the same handle is harmless
    assert fs.ops.files == {}


async def test_source_videos_are_served_byte_for_byte(fs, dataset_dir):
    rel = "archery/archery_001.mp4"
    assert await fs.read(f"t0/videos/{rel}", chunk=1000) == (dataset_dir / rel).read_bytes()


async def test_frames_equal_an_independent_decode(fs, dataset_dir):
    frames = decode_all_reference(str(dataset_dir / "bowling/bowling_001.mp4"))
    for index in (0, len(frames) - 1):
        data = await fs.read(f"t0/videos/bowling/bowling_001/frame{index}/aug0")
        array = np.load(io.BytesIO(data))
        assert np.array_equal(array, frames[index])
        assert read_painted_index(array) == index


async def test_status_and_task_files(fs, t0_config):
    info = await fs.ops.open(await fs.inode(".sand/status.json"), os.O_RDONLY, CTX)
    assert info.direct_io  # its size changes between getattr and read
    await fs.ops.release(info.fh)
    status = json.loads(await fs.read(".sand/status.json"))
    assert status["pid"] == os.getpid() and set(status["tasks"]) == {"t0"}
    assert await fs.read(".sand/tasks/t0.yaml") == t0_config.read_bytes()


async def test_a_failed_view_is_eio(fs, monkeypatch):
    async def failing(*_):
        raise ObjectFailed("decode failed")

    monkeypatch.setattr(fs.ops.service, "read_view", failing)
    info = await fs.ops.open(await fs.inode("t0/0/0/view"), os.O_RDONLY, CTX)
    assert await errno_of(fs.ops.read(info.fh, 0, 100)) == errno.EIO
    await fs.ops.release(info.fh)


async def test_an_unexpected_error_is_logged_once_and_becomes_eio(fs, monkeypatch, caplog):
    def broken(*_):
        raise KeyError("a bug")

    monkeypatch.setattr(fs.ops.service, "view_meta", broken)
    view = await fs.inode("t0/0/0/view")
    assert await errno_of(fs.ops.getxattr(view, b"user.sand.meta", CTX)) == errno.EIO
    logged = [r.message for r in caplog.records if r.name == "sandfs.fuse.handlers"]
    assert logged == ["unexpected error in getxattr"]


# -- extended attributes ------------------------------------------------------------------


async def test_view_xattrs(fs, plan):
    view = await fs.inode("t0/1/0/view")
    assert set(await fs.ops.listxattr(view, CTX)) == VIEW_XATTRS
    assert await fs.getxattr("t0/1/0/view", "user.sand.readers") == b"1"
    assert await fs.getxattr("t0/1/0/view", "user.sand.state") in (
        b"planned", b"materializing", b"ready")
    await fs.read("t0/1/0/view")
    assert await fs.getxattr("t0/1/0/view", "user.sand.state") == b"ready"
    meta = json.loads(await fs.getxattr("t0/1/0/view", "user.sand.meta"))
    assert meta == plan.view_meta(plan.view_plan(1, 0))
    labels = json.loads(await fs.getxattr("t0/1/0/view", "user.sand.labels"))
    assert labels == [sample["label"] for sample in meta["samples"]]


async def test_a_views_planned_values_are_worked_out_once_for_repeated_requests(fs, monkeypatch):
    """os.getxattr asks twice a value longer than 128 bytes (a small try, then the value),
    each try a request: the second answers from the first. A task registered again (a new
    plan under its name) is worked out anew; the state never comes from before."""
    service, calls = fs.ops.service, []

    def counting(*args):
        calls.append(args)
        return type(service).view_meta(service, *args)

    monkeypatch.setattr(service, "view_meta", counting)
    meta = await fs.getxattr("t0/1/0/view", "user.sand.meta")
    assert await fs.getxattr("t0/1/0/view", "user.sand.meta") == meta
    assert len(calls) == 1
    labels = await fs.getxattr("t0/1/0/view", "user.sand.labels")
    assert await fs.getxattr("t0/1/0/view", "user.sand.labels") == labels
    assert len(calls) == 2
    monkeypatch.setitem(service.tasks, "t0", copy.copy(service.tasks["t0"]))
    assert await fs.getxattr("t0/1/0/view", "user.sand.meta") == meta
    assert len(calls) == 3
    ended = weakref.ref(service.tasks["t0"])  # that plan ends: its kept values do not hold it
    service.tasks["t0"] = copy.copy(service.tasks["t0"])
    gc.collect()
    assert ended() is None
    assert await fs.getxattr("t0/1/0/view", "user.sand.state") != b"ready"
    await fs.read("t0/1/0/view")
    assert await fs.getxattr("t0/1/0/view", "user.sand.state") == b"ready"


async def test_meta_json_is_the_meta_xattr_as_a_file(fs):
    """ITERATION/meta.json serves user.sand.meta also where a large batch makes it longer than
    the kernel's 64 KiB xattr limit (E2BIG)."""
    text = await fs.read("t0/1/0/meta.json")
    assert text == await fs.getxattr("t0/1/0/view", "user.sand.meta")
    assert (await fs.stat("t0/1/0/meta.json")).st_size == len(text)


async def test_source_video_and_frame_xattrs(fs):
    video = "t0/videos/juggling/juggling_000.mp4"
    meta = json.loads(await fs.getxattr(video, "user.sand.meta"))
    assert (meta["label"], meta["label_index"], meta["width"], meta["height"]) == (
        "juggling", 2, 64, 48)
    assert json.loads(await fs.getxattr(video, "user.sand.labels")) == ["juggling"]
    assert await fs.getxattr(video, "user.sand.state") == b"ready"
    aug0 = json.loads(await fs.getxattr("t0/videos/juggling/juggling_000/frame2/aug0",
                                        "user.sand.meta"))
    assert (aug0["frame_index"], aug0["depth"], aug0["shape"], aug0["ops"]) == (
        2, 0, [48, 64, 3], [])


@pytest.mark.parametrize(("path", "name"), [
    ("t0/0/0/view", b"user.sand.nope"),
    ("t0/0/0/view", b"user.sand"),
    ("t0/0/0/view", b"security.selinux"),
    ("t0/videos/archery/archery_000.mp4", b"user.sand.metaa"),
    ("t0/videos/archery/archery_000.mp4", b"user.sand.readers"),
    ("t0/videos/archery/archery_000/frame0/aug0", b"user.sand.readers"),
    ("t0", b"user.sand.readers"),
    ("t0", b"user.sand.meta"),
    ("", b"user.sand.meta"),
    (".sand/status.json", b"user.sand.state"),
    ("t0/videos/archery/archery_000", b"user.sand.meta"),
])
async def test_absent_xattrs_are_enodata(fs, path, name):
    assert pyfuse3.ENOATTR == errno.ENODATA
    call = fs.ops.getxattr(await fs.inode(path), name, CTX)
    assert await errno_of(call) == errno.ENODATA


async def test_only_views_videos_frames_and_tasks_list_xattrs(fs):
    for path in ("", "t0/0", ".sand/status.json", ".sand/tasks/t0.yaml"):
        assert await fs.ops.listxattr(await fs.inode(path), CTX) == [], path
    assert await fs.ops.listxattr(await fs.inode("t0"), CTX) == [b"user.sand.classes"]
    aug0 = await fs.inode("t0/videos/archery/archery_000/frame0/aug0")
    assert set(await fs.ops.listxattr(aug0, CTX)) == XATTRS
