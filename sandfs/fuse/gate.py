"""The startup gate of the FUSE layer: until the tasks are planned (sandfs/startup.py), a request
that needs them waits, bounded by the scan alone.

Before that, the namespace answers the root, `.sand` and its files, and the directories of the
tasks the mount's configs name (their owner and mode come from the configs): a reader waiting
in a task's tree holds that directory, not `/`, so a first lookup of `.sand` (status.json, to
watch the scan) never waits behind it.
"""

from __future__ import annotations

import errno

from sandfs.fuse.handlers import fuse_error
from sandfs.fuse.namespace import Namespace, Node
from sandfs.startup import NotServing, OwnRequest


class Gate:
    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self.startup = namespace.startup

    async def lookup(self, directory: Node, name: str | None, ctx) -> None:
        """Wait until the tasks are planned if looking up `name` in `directory` (None: listing
        it) needs them."""
        if not self.startup.ready and self.namespace.needs_tasks(directory, name):
            await self._wait(ctx)

    async def contents(self, node: Node, ctx) -> None:
        """Wait until the tasks are planned before reading what a task's node holds beyond its
        owner and mode (its attributes' values)."""
        if not self.startup.ready and node.task:
            await self._wait(ctx)

    async def _wait(self, ctx) -> None:
        """EIO if the mount stops first, EDEADLK for the daemon's own threads."""
        try:
            await self.startup.wait(ctx.pid if ctx is not None else 0)
        except NotServing as exc:
            raise fuse_error(errno.EDEADLK if isinstance(exc, OwnRequest) else errno.EIO) from exc
