"""Counters shared by the worker threads and the FUSE loop (reported in .sand/status.json)."""

from __future__ import annotations

import threading
from collections import Counter


class Stats:
    """Thread-safe named counters and per-task figures. Counters count since the daemon started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._task: dict[str, Counter[str]] = {}
        self._stall_seconds: dict[str, float] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def add_task(self, task: str, name: str, amount: int = 1) -> None:
        with self._lock:
            self._task.setdefault(task, Counter())[name] += amount

    def add_stall(self, task: str, seconds: float) -> None:
        with self._lock:
            self._stall_seconds[task] = self._stall_seconds.get(task, 0.0) + seconds

    def forget_task(self, task: str) -> None:
        """A task ended: a later task of the same name starts from zero."""
        with self._lock:
            self._task.pop(task, None)
            self._stall_seconds.pop(task, None)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def task_counts(self, task: str) -> dict[str, int]:
        with self._lock:
            return dict(self._task.get(task, {}))

    def stall_seconds(self, task: str) -> float:
        with self._lock:
            return self._stall_seconds.get(task, 0.0)
