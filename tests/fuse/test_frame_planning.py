"""Planning a `frame{N}` directory's aug{D} happens in a worker thread: the mount answers other
requests meanwhile, concurrent listings plan once, a repeated one not again, and no FUSE
request plans on the event loop. The planner is made to block on an event the test releases;
every wait is bounded, so a regression fails instead of hanging."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from sandfs.sched import frameplanner
from sandfs.sched.frameplanner import FramePlanner
from tests.helpers.operations import CTX

WAIT = 20  # seconds: far above what any request here takes, below a hang


@pytest.fixture
def fs(idle_fs):
    """No scheduler: the only threads are the ones the requests start."""
    return idle_fs


def used_frame(plan) -> tuple[str, list[str]]:
    """A frame directory with aug{D} beyond aug0 in epoch 0, and the names it lists."""
    clip = plan.view_plan(0, 0).clips[0]
    frame = clip.frame_indices[0]
    deepest = FramePlanner().max_depth(plan, 0, clip.video_index, frame)
    assert deepest > 0
    path = f"t0/videos/{plan.videos[clip.video_index].name}/frame{frame}"
    return path, [f"aug{d}" for d in range(deepest + 1)]


class Gate:
    """Stands in for the planner: counts its calls and the threads they run on, and holds
    each call until released."""

    def __init__(self, monkeypatch, *, held: bool = True) -> None:
        self.real = frameplanner.video_uses
        self.calls: list[threading.Thread] = []
        self.entered = threading.Event()
        self.open = threading.Event()
        if not held:
            self.open.set()
        monkeypatch.setattr(frameplanner, "video_uses", self)

    def __call__(self, *args):
        self.calls.append(threading.current_thread())
        self.entered.set()
        if not self.open.wait(WAIT):
            raise TimeoutError("the test never released the planner")
        return self.real(*args)


@asynccontextmanager
async def held_listings(fs, gate: Gate, path: str, count: int = 1) -> AsyncIterator[list]:
    """`count` concurrent listings of `path`, their planning held while the block runs; the
    list their names go to as they finish. The planner is released when the block ends, also
    on a failed assertion (the nursery would wait for the held thread)."""
    listed: list[list[str]] = []

    async def list_frame():
        listed.append(await fs.listdir(path))

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(list_frame)
            try:
                assert await trio.to_thread.run_sync(gate.entered.wait, WAIT)
                yield listed
            finally:
                gate.open.set()


async def test_other_requests_are_answered_while_a_frame_directory_is_planned(
        fs, plan, monkeypatch):
    path, names = used_frame(plan)
    async with held_listings(fs, Gate(monkeypatch), path) as listed:
        # the listing's planning is under way, held: the rest of the mount answers
        status = json.loads(await fs.read(".sand/status.json"))
        assert status["tasks"]["t0"]["epoch"] == 0
        assert (await fs.stat("t0/0/0/view")).st_size == plan.view_nbytes(0, 0)
        assert await fs.listdir("t0/0") == [str(i) for i in range(plan.iterations_per_epoch)]
        assert listed == []
    assert listed == [names]


async def test_concurrent_listings_plan_once_and_a_repeated_one_not_again(
        fs, plan, monkeypatch):
    path, names = used_frame(plan)
    gate = Gate(monkeypatch)
    async with held_listings(fs, gate, path, count=4) as listed:
        await trio.testing.wait_all_tasks_blocked()  # the three others wait for the first
        assert len(gate.calls) == 1 and listed == []
    assert listed == [names] * 4
    with trio.fail_after(WAIT):
        assert await fs.listdir(path) == names
        sizes = [(await fs.stat(f"{path}/{name}")).st_size for name in names]
        assert sizes == [len(await fs.read(f"{path}/{name}")) for name in names]
    assert len(gate.calls) == 1


async def test_no_request_plans_frames_on_the_event_loop(fs, plan, monkeypatch):
    """Each handler that reads an aug{D} plan: readdir and lookup plan first; getattr, getxattr
    and read plan again when what was planned is gone (here: forgotten)."""
    path, names = used_frame(plan)
    deepest = f"{path}/{names[-1]}"
    gate = Gate(monkeypatch, held=False)
    service = fs.ops.service

    def forget():
        service.frames.forget("t0")
        return len(gate.calls)

    with trio.fail_after(WAIT):
        assert await fs.listdir(path) == names
        forget()
        inode = await fs.inode(deepest)  # lookup
        size = (await fs.ops.getattr(inode, CTX)).st_size
        before = forget()
        assert (await fs.ops.getattr(inode, CTX)).st_size == size
        assert len(gate.calls) == before + 1
        forget()
        meta = json.loads(await fs.ops.getxattr(inode, b"user.sand.meta", CTX))
        assert meta["depth"] == len(names) - 1 and meta["ops"]
        info = await fs.ops.open(inode, 0, CTX)
        forget()
        data = bytes(await fs.ops.read(info.fh, 0, size))
        await fs.ops.release(info.fh)
    assert len(data) == size
    assert len(gate.calls) == 5
    assert threading.current_thread() not in gate.calls
