"""A process's children, from /proc (every thread's list: a child started by a worker thread
is listed under that thread), and the shared memory segments it made."""

from __future__ import annotations

import os

from sandfs.ops.isolated import SHM_DIR, segment_prefix


def children_of(pid: int | str = "self") -> set[int]:
    children: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children |= {int(child) for child in f.read().split()}
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return children


def segments_of(pid: int) -> set[str]:
    """The shared memory segments process `pid` made for its isolated steps (not other runs'
    on the same machine)."""
    return {name for name in os.listdir(SHM_DIR) if name.startswith(segment_prefix(pid))}
