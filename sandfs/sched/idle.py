"""What another user's task makes ahead follows its reads (docs/deploy.md#limits): a task of a
user other than root or the daemon's goes back to making nothing ahead once none of its views
was opened for `idle_after_s`, and may open views at most `windows_ahead_of_reads` windows past
the furthest it read (opening one plans and freezes its window, for every task on the dataset).
The tasks of root, the daemon's user and the mount's configs are bound by neither."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable

import trio

from sandfs.bounds import LimitReached
from sandfs.sched.planning import WindowPlanner
from sandfs.sched.windows import WindowBook


async def rest_idle_tasks(book: WindowBook, planner: WindowPlanner, idle_after_s: float,
                          wake: Callable[[], None]) -> None:
    """Every quarter of `idle_after_s`: the tasks idle since make nothing ahead from now on."""
    while True:
        await trio.sleep(idle_after_s / 4)
        since = time.monotonic() - idle_after_s
        for name in book.idle(since):
            await planner.rest_plan(name, since)
            wake()


def check_reach(book: WindowBook, task: str, epoch: int, ahead: int) -> None:
    """LimitReached (EDQUOT) for a view too far past the task's reads (`WindowBook.too_far`)."""
    if book.too_far(task, epoch, ahead):
        raise LimitReached(errno.EDQUOT, f"epoch {epoch} is more than {ahead} windows past "
                                         f"the task's reads (windows_ahead_of_reads)")
