"""A reader of new windows beside tasks that come and go: the churn tests and the chaos run
(scripts/reliability.py --chaos) read one task's views one after another in a thread, each
epoch a new one, and note how long each read took and what it raised."""

from __future__ import annotations

import errno
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# a read slower than this is a hang: reads of new windows take well under a second here
HANG_S = 20.0


@dataclass
class ViewReader:
    """Reads MNT/TASK/EPOCH/ITERATION/view from `epoch` on, `iterations` per epoch, until
    stopped; keeps the bytes of the first `keep` views for a byte check."""

    mountpoint: Path
    task: str
    iterations: int
    epochs: int
    keep: int = 8
    durations_s: list[float] = field(default_factory=list)
    errors: list[tuple[tuple[int, int], int]] = field(default_factory=list)  # (view, errno)
    kept: dict[tuple[int, int], bytes] = field(default_factory=dict)
    read_bytes: dict[tuple[int, int], bytes] = field(default_factory=dict)
    started_at: float | None = None  # monotonic start of the read in progress
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ViewReader:
        self._thread = threading.Thread(target=self._run, daemon=True, name="view reader")
        self._thread.start()
        return self

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            key = divmod(index % (self.epochs * self.iterations), self.iterations)
            self.started_at = time.monotonic()
            try:
                data = self.mountpoint.joinpath(self.task, *map(str, key), "view").read_bytes()
            except OSError as exc:
                self.errors.append((key, exc.errno or 0))
                if exc.errno in (errno.ENOTCONN, errno.ENOENT):  # the daemon is gone
                    return
            else:
                if len(self.kept) < self.keep and key not in self.kept:
                    self.kept[key] = data
            finally:
                self.durations_s.append(time.monotonic() - self.started_at)
                self.started_at = None
            index += 1

    def hung_s(self) -> float:
        """How long the read in progress has taken so far (0: none)."""
        started = self.started_at
        return 0.0 if started is None else time.monotonic() - started

    def stop(self, timeout_s: float = HANG_S) -> bool:
        """Stop after the read in progress; False if it did not end within `timeout_s`."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def write_task(mountpoint: Path, name: str, text: str) -> list[int]:
    """Register through .sand/tasks/NAME.yaml; the errnos of a refusal (none: registered)."""
    path = mountpoint / ".sand" / "tasks" / f"{name}.yaml"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)  # closing it registers the task, or refuses it
    except OSError as exc:
        return [exc.errno or 0]
    return []


def register_and_remove(mountpoint: Path, name: str, text: str) -> list[int]:
    """Write a task YAML into .sand/tasks and remove it again, as a user would with cp and rm:
    the errnos met on the way (a refusal is an error on the write, not a failure here)."""
    met = write_task(mountpoint, name, text)
    try:
        os.unlink(mountpoint / ".sand" / "tasks" / f"{name}.yaml")
    except OSError as exc:
        met.append(exc.errno or 0)
    return met
