"""Dropping the kernel's cached copy of a view once every reader has read it.

Views are opened with `keep_cache`, so a view that several tasks share (a search's trials) is
copied to the kernel once and its other readers get it from the page cache. Once all of them
have read it, those pages only take memory. Kept, the page cache grew by one batch per read
until the kernel reclaimed on every allocation, and each read copied into fresh pages: serving
a ready 19 MB view went from ~14 ms to ~46 ms of daemon CPU after a few epochs
(docs/performance.md#fuse-serving-and-the-page-cache). Dropped, the next view's read reuses the
freed pages.

The kernel call waits for pages locked by a read in flight, which only this daemon's trio loop
answers: it runs in a thread of its own, never in the loop.
"""

from __future__ import annotations

import errno
import logging
import queue
import threading
from collections.abc import Callable

import pyfuse3

log = logging.getLogger(__name__)

_STOP = -1


def invalidate_pages(inode: int) -> None:
    pyfuse3.invalidate_inode(inode, attr_only=False)


class PageDropper:
    """Drops inodes' cached pages in a thread of its own, between `start` (once the FUSE
    session is up) and `close` (before it closes). Not started, it drops nothing: no kernel
    to tell (the handlers called in-process)."""

    def __init__(self, invalidate: Callable[[int], None] = invalidate_pages) -> None:
        self._invalidate = invalidate
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.dropped = 0  # inodes whose pages the kernel dropped

    def start(self) -> None:
        # here, not at the first drop: starting a thread in `release` made its reply late
        # enough to miss an unmount that followed the close at once
        self._thread = threading.Thread(target=self._run, name="sandfs-page-dropper",
                                        daemon=True)
        self._thread.start()

    def drop(self, inode: int) -> None:
        if self._thread is not None and not self._closed:
            self._queue.put(inode)

    def close(self, timeout: float = 5.0) -> None:
        """Stop before the FUSE session closes (the thread calls into it): the drops queued
        before are done, later ones ignored."""
        self._closed = True
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the page dropper did not stop within %.0f s", timeout)

    def _run(self) -> None:
        while (inode := self._queue.get()) != _STOP:
            try:
                self._invalidate(inode)
            except OSError as exc:
                if exc.errno != errno.ENOENT:  # ENOENT: the kernel forgot the inode already
                    log.warning("dropping the cached pages of inode %d: %s", inode, exc)
                continue
            self.dropped += 1
