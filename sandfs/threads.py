"""One thread limiter per concern, so that threads stuck in one (registrations planning a
user's task, a slow disk under the store) never take the threads of another (window planning,
source reads, the metrics port). Each trio run has its own; trio's default limiter is left to
the rest."""

from __future__ import annotations

import threading

import trio

# threads per concern: registrations are per-uid bounded on top (Limits.registrations_per_uid)
THREADS = {
    "registration": 4,
    "task_files": 2,  # parsing and checking an uploaded YAML: never on the event loop
    "planning": 2,  # windows and frames of the tasks
    "source_reads": 4,  # videos/VIDEO.EXT passed through
    "metrics": 2,  # the uid lookup of a GET /metrics client
    "store": 1,  # resizing the object store as tasks come and go
}
_LIMITERS: trio.lowlevel.RunVar = trio.lowlevel.RunVar("sandfs_thread_limiters")


def limiter(concern: str) -> trio.CapacityLimiter:
    """The limiter of `concern` (a key of THREADS) in the current trio run."""
    try:
        limiters = _LIMITERS.get()
    except LookupError:
        limiters = {name: trio.CapacityLimiter(n) for name, n in THREADS.items()}
        _LIMITERS.set(limiters)
    return limiters[concern]


async def stop_when_cancelled(stop: threading.Event) -> None:
    """Beside a planning thread: tell it to stop once the caller is cancelled (shutdown). It
    checks between chunks of its work (`plan.window.stop_if_asked`), so the daemon does not
    wait for a whole window to be planned; ended with the thread, it sets `stop` too, late."""
    try:
        await trio.sleep_forever()
    finally:
        stop.set()

