"""The FUSE layer in-process: `SandOperations` over a live `ViewService`, its handlers called
directly under trio (no kernel, no mount), and a small client that walks paths the way the
kernel would (lookup per component, opendir/readdir, open/read/flush/release).

`make_service` is the one place tests build a ViewService.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyfuse3
import pytest
import trio

from sandfs.config.settings import MountSettings
from sandfs.fuse.operations import SandOperations
from sandfs.media.datasets import ScanBook
from sandfs.media.types import DatasetScan, MediaLimits
from sandfs.plan.build import plan_new_task
from sandfs.plan.task import TaskPlan
from sandfs.registration import admit_upload
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats

CTX = pyfuse3.RequestContext()  # uid, gid and pid 0: no handler looks at them


def make_service(plans: Sequence[TaskPlan], *, task_texts: dict[str, str] | None = None,
                 scans: dict[tuple, DatasetScan] | None = None, cache_dir: Path | None = None,
                 config_dir: str = "/", workers: int = 1) -> ViewService:
    """A service as the daemon builds it, without a disk store. With `scans` (and `cache_dir`),
    tasks can join through .sand/tasks, planned by the daemon's own `plan_new_task`."""
    engine = OnDemandObjects(workers=workers, memory_budget_bytes=64 << 20)
    planner = admit = None
    if scans is not None:
        settings = MountSettings(mountpoint="/nonexistent", cache_dir=str(cache_dir),
                                 workers=workers, k_epochs=plans[0].k_epochs, decode_ahead=0,
                                 memory_limit_bytes=256 << 20, storage_budget_bytes=1 << 30,
                                 storage_budget_given=True,
                                 cache_format="auto", scheduling="priority",
                                 prune_mode="algorithm1", media_limits=MediaLimits())
        book = ScanBook(scans, str(cache_dir), workers, settings.media_limits)
        planner = partial(plan_new_task, settings, book, plans[0].coordination)
        admit = partial(admit_upload, settings=settings, config_dir=config_dir)
    return ViewService(plans, engine=engine, stats=Stats(), task_texts=task_texts,
                       task_planner=planner, admit=admit)


@asynccontextmanager
async def serving(service: ViewService, *, scheduler: bool = True
                  ) -> AsyncIterator[SandOperations]:
    """The operations over `service`, with its scheduler running until the block ends (as in
    the daemon); `scheduler=False`: never started, so nothing is materialized unless read."""
    async with trio.open_nursery() as nursery:
        if scheduler:
            await nursery.start(service.run)
        try:
            yield SandOperations(service)
        finally:
            nursery.cancel_scope.cancel()


async def errno_of(call: Awaitable) -> int:
    """The errno a handler answers with (it must raise FUSEError, nothing else)."""
    with pytest.raises(pyfuse3.FUSEError) as caught:
        await call
    return caught.value.errno


@dataclass
class Listing:
    """Stands in for pyfuse3's readdir token: takes entries until `room` of them are in."""

    room: int = 1 << 30
    entries: list[tuple[str, pyfuse3.EntryAttributes, int]] = field(default_factory=list)


def readdir_reply(token: Listing, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int):
    """pyfuse3.readdir_reply for a `Listing`: False (entry not taken) once the buffer is full."""
    if len(token.entries) >= token.room:
        return False
    token.entries.append((os.fsdecode(name), attr, next_id))
    return True


@dataclass
class Client:
    """Path-level calls on the operations, each one the requests the kernel would send."""

    ops: SandOperations

    async def inode(self, path: str) -> int:
        inode = pyfuse3.ROOT_INODE
        for name in filter(None, path.split("/")):
            inode = (await self.ops.lookup(inode, os.fsencode(name), CTX)).st_ino
        return inode

    async def stat(self, path: str) -> pyfuse3.EntryAttributes:
        return await self.ops.getattr(await self.inode(path), CTX)

    async def listdir(self, path: str, room: int = 1 << 30) -> list[str]:
        """Read the whole directory, `room` entries per readdir call."""
        fh = await self.ops.opendir(await self.inode(path), CTX)
        names: list[str] = []
        start = 0
        while True:
            listing = Listing(room)
            await self.ops.readdir(fh, start, listing)
            if not listing.entries:
                break
            names += [name for name, _, _ in listing.entries]
            assert listing.entries[-1][2] > start, "readdir offsets must move forward"
            start = listing.entries[-1][2]
        await self.ops.releasedir(fh)
        return names

    async def read(self, path: str, chunk: int = 128 << 10) -> bytes:
        """open, read to EOF in `chunk`-sized requests, flush, release."""
        info = await self.ops.open(await self.inode(path), os.O_RDONLY, CTX)
        parts = []
        try:
            while part := bytes(await self.ops.read(info.fh, sum(map(len, parts)), chunk)):
                parts.append(part)
            await self.ops.flush(info.fh)
        finally:
            await self.ops.release(info.fh)
        return b"".join(parts)

    async def write_new(self, path: str, data: bytes) -> None:
        """create, write, flush (where a refused task file's error comes back), release."""
        parent, _, name = path.rpartition("/")
        info, _ = await self.ops.create(await self.inode(parent), os.fsencode(name), 0o644,
                                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, CTX)
        try:
            await self.ops.write(info.fh, 0, data)
            await self.ops.flush(info.fh)
        finally:
            await self.ops.release(info.fh)

    async def getxattr(self, path: str, name: str) -> bytes:
        return await self.ops.getxattr(await self.inode(path), name.encode(), CTX)
