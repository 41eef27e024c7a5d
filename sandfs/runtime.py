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
  less in 14 of 16 pairs; with four readers no difference (docs/performance.md §23). Set before
  numpy is imported, like the BLAS threads; a value the user set wins.
- **malloc arenas:** glibc gives each thread that finds the others' arenas busy an arena of its
  own, up to 8 per core, and a freed block goes back to the arena it came from. The daemon's jobs
  run in trio's cached worker threads, so the frames and clips one thread allocates are often
  freed by another. Over 100 epochs (docs/performance.md §17) two arenas left the reader
  waiting 14.5-16.9 s in all (8 runs), against 15.3-19.1 s with glibc's default, at the
  same CPU.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
HUGE_PAGES_ENV = "NUMPY_MADVISE_HUGEPAGE"
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def numpy_environment() -> None:
    """Before numpy is imported: OpenBLAS starts no threads and arrays are not advised to use
    huge pages (unless the user asked for either)."""
    os.environ.setdefault(BLAS_THREADS_ENV, "1")
    os.environ.setdefault(HUGE_PAGES_ENV, "0")


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at `count` for the threads this process starts from now on;
    False where the C library has no such setting (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = bool(mallopt(_M_ARENA_MAX, count))
    if not done:
        log.debug("malloc arenas left as they are: mallopt refused %d", count)
    return done
