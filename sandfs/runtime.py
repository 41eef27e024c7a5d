"""Process-wide settings of the sandfs command and its daemon, made before their threads start.

- **BLAS threads:** numpy's OpenBLAS starts a thread per core when numpy is imported. No sandfs
  process multiplies matrices, and starting them cost 0.2 CPU-s of the command's 0.55 (2 cores;
  the mount took 1.25 CPU-s to serve, not 1.5). Set in the environment before numpy is imported
  (`sandfs/__main__.py`), so the daemon's worker processes inherit it; a value the user set wins.
- **Huge pages for numpy's arrays:** numpy asks the kernel for transparent huge pages for every
  array of 4 MB or more (`madvise`). A huge page is a free 2 MB block, and on a VM that reports
  its free memory to the host (virtio-balloon free page reporting, at 2 MB blocks) that is
  exactly the memory the host took back: each first touch of one cost a host fault on top of
  zeroing 2 MB. The daemon touches fresh memory for every batch buffer of its first windows,
  and zeroing them was 10% of its CPU. Without the advice, cold SlowFast-size runs, two rounds
  of eight alternating pairs: the daemon 3.52 and 3.80 CPU-s against 3.74 and 3.95 (medians),
  less in 14 of 16 pairs; with four readers no difference (docs/performance.md#fresh-pages). Set
  before numpy is imported, like the BLAS threads; a value the user set wins.
- **malloc arenas:** glibc gives each thread that finds the others' arenas busy an arena of its
  own, up to 8 per core, and a freed block goes back to the arena it came from. The daemon's jobs
  run in trio's cached worker threads, so the frames and clips one thread allocates are often
  freed by another. Over 100 epochs (docs/performance.md#memory) two arenas left the reader
  waiting 14.5-16.9 s in all (8 runs), against 15.3-19.1 s with glibc's default, at the
  same CPU.
- **Freed memory kept for the next frames:** a fresh page costs this VM ~1.5 µs to fault in
  (2.7 GB/s, against ~40 GB/s to write memory already mapped), and glibc gives memory back
  early: blocks over its mmap threshold (128 KiB until a large block is freed, which raises
  it) are unmapped when freed, and a heap top with twice the threshold free is trimmed. A
  pass's frames (full-size RGB, 300-700 KB each) and clips (4.8 MB) were faulted in again and
  again. With blocks under 32 MiB from the heaps and up to 64 MiB free at a heap's top kept,
  cold SlowFast-size runs, five alternating pairs: 22% fewer page faults, the daemon 2.73
  CPU-s against 2.83, the last batch 1.74 s against 1.78 s, peak RSS +32 MB (medians,
  docs/performance.md#fresh-pages). Set where the daemon starts; a glibc setting the user made in
  the environment (`MALLOC_*_`) wins, and the daemon then gives nothing back by hand
  (`trim_free_memory`): what malloc keeps is theirs to say.
- **The GIL's turns:** a thread waiting for the GIL gets it once its holder has run Python for
  the switch interval, 5 ms by default. The daemon's job threads drop the GIL for every frame
  an op makes (OpenCV, numpy copies) and wait for it again after each, while the trio loop
  holds it to answer FUSE (pyfuse3 copies each read's reply with it held): a clip made from
  carried frames took 6-8 ms of a job thread's time for 3 ms of CPU. At 0.2 ms, cold
  SlowFast-size runs, six alternating pairs each: 2% sooner to the last batch with one reader
  (2.25 s against 2.30 s) and with four (2.81 s against 2.87 s); 1 ms gave 1.5%, 0.05 ms no
  more than 0.2 ms and more CPU (docs/performance.md#threads-and-the-gil). Set where the daemon
  starts.
- **The collector's old objects:** the daemon's imports leave ~49k objects the collector
  tracks (modules' functions, classes, their dicts) that live as long as it does, and each full
  collection walks them all: 10-12 ms with the GIL held, one of which came during a cold mount's
  startup (21 ms of collections in all before the last batch). Frozen once the daemon's modules
  are imported (`gc.freeze`), they are not walked again: 3 ms. Cold SlowFast-size mounts, eight
  alternating pairs, medians: `sandfs mount` 0.295 s against 0.309 s and the first batch 0.507
  s against 0.533 s after launch, sooner in all eight (docs/performance.md#cold-start).
- **No collections while a window is planned:** a window's plan is a few hundred thousand
  objects that live as long as the window, made in one go, and the collector walked the young
  ones again and again while they were made (and all of them at each full collection): 26% of
  planning 1,000 videos, 37% of 10,000 (docs/performance.md#planning-and-scheduling-at-scale).
  Paused only while planning (`collector_paused`, from any thread); what others leave meanwhile
  is collected after.
- **Planned windows frozen too:** once planned and on the board, a window's objects are
  frozen like the imports' (`settle_collector`): each full collection walked every planned
  window's objects with the GIL held, 2.2 s of the event loop as a window of 40,000 videos was
  added (docs/performance.md#planning-and-scheduling-at-scale). A window dropped later is freed by
  reference counting (its objects refer to no cycle); a task that ends thaws them all
  (`thaw_collector`), since a task's plan refers to itself and only the collector frees it.
  A scan's results are frozen as they grow, each time after a full collection of what is not
  frozen yet: garbage cycles frozen would be kept until a task ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import sys
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
HUGE_PAGES_ENV = "NUMPY_MADVISE_HUGEPAGE"
MALLOC_ARENAS = 2
MALLOC_MMAP_THRESHOLD = 32 << 20  # glibc's largest: smaller blocks come from the heaps
MALLOC_TRIM_THRESHOLD = 64 << 20  # free at a heap's top kept up to this
MALLOC_USER_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                   "MALLOC_MMAP_MAX_")
GIL_SWITCH_INTERVAL_S = 0.0002
# glibc's malloc.h
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def numpy_environment() -> None:
    """Before numpy is imported: OpenBLAS starts no threads and arrays are not advised to use
    huge pages (unless the user asked for either)."""
    os.environ.setdefault(BLAS_THREADS_ENV, "1")
    os.environ.setdefault(HUGE_PAGES_ENV, "0")


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at `count` for the threads this process starts from now on;
    False where the C library has no such setting (not glibc)."""
    return _mallopt(_M_ARENA_MAX, count, "arenas")


def keep_freed_memory() -> bool:
    """Blocks under MALLOC_MMAP_THRESHOLD come from malloc's heaps, and up to
    MALLOC_TRIM_THRESHOLD free at a heap's top stays mapped, for the next ones; False where
    the C library has no such setting or the user set one in the environment."""
    if _malloc_set_by_user():
        return False
    return (_mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD, "mmap threshold")
            and _mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD, "trim threshold"))


def _mallopt(param: int, value: int, what: str) -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = bool(mallopt(param, value))
    if not done:
        log.debug("malloc %s left as it is: mallopt refused %d", what, value)
    return done


def _malloc_set_by_user() -> bool:
    return any(name in os.environ for name in MALLOC_USER_ENV)


def trim_free_memory(pad: int = MALLOC_TRIM_THRESHOLD) -> bool:
    """Give the free pages of every malloc heap back to the kernel but `pad` bytes at the
    main heap's top (`malloc_trim(pad)`: the top that `keep_freed_memory` keeps for the next
    frames stays), after the daemon freed much that it will not allocate again soon (the
    scan's work, a window's parts merged, a window dropped); False where the C library has no
    such call (not glibc), or where a glibc setting the user made wins: it says what malloc
    keeps (a trim threshold or top pad of theirs), not our pad."""
    if _malloc_set_by_user():
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    trim(pad)
    return True


def quick_gil_turns(interval_s: float = GIL_SWITCH_INTERVAL_S) -> None:
    """A thread waiting for the GIL gets it after `interval_s` of another's Python, not 5 ms."""
    sys.setswitchinterval(interval_s)


def settle_collector(collect: bool = False) -> None:
    """The objects alive now live long (the daemon's modules once imported, a window once
    planned): the cyclic collector stops walking them. `collect`: garbage cycles not collected
    yet are collected first (frozen, they would be kept until `thaw_collector`); a full
    collection, which walks only what is not frozen yet."""
    if collect:
        gc.collect()
    gc.freeze()


def thaw_collector() -> None:
    """Objects frozen may have become garbage the collector alone can free (an ended task's
    plan): it walks them again (they are frozen again with the next window)."""
    gc.unfreeze()


_pause = threading.Lock()
_pausing = 0  # threads inside collector_paused
_enabled_before = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while in here, in any thread; the collector is on again once the
    last thread leaves (if it was on when the first came in)."""
    global _pausing, _enabled_before
    with _pause:
        if _pausing == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause:
            _pausing -= 1
            if _pausing == 0 and _enabled_before:
                gc.enable()
