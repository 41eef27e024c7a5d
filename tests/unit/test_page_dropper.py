"""The page dropper calls the kernel from its own thread, in order, and stops before the FUSE
session closes."""

from __future__ import annotations

import errno
import threading

from sandfs.fuse.pagecache import PageDropper


def test_drops_run_in_order_in_a_thread_of_their_own_and_stop_at_close():
    seen, threads = [], set()

    def invalidate(inode: int) -> None:
        if inode == 2:
            raise OSError(errno.ENOENT, "the kernel forgot it")  # not an error: skipped
        seen.append(inode)
        threads.add(threading.current_thread().name)

    dropper = PageDropper(invalidate)
    dropper.start()
    for inode in (1, 2, 3):
        dropper.drop(inode)
    dropper.close()
    dropper.drop(4)  # the session is closing: nothing more reaches the kernel
    assert seen == [1, 3] and dropper.dropped == 2
    assert threads == {"sandfs-page-dropper"}


def test_not_started_it_drops_nothing():
    """The handlers called in-process have no kernel to tell."""
    seen = []
    dropper = PageDropper(seen.append)
    dropper.drop(1)
    dropper.close()
    assert seen == [] and dropper.dropped == 0
