"""A process's children, from /proc (every thread's list: a child started by a worker thread
is listed under that thread)."""

from __future__ import annotations

import os


def children_of(pid: int | str = "self") -> set[int]:
    children: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children |= {int(child) for child in f.read().split()}
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return children
