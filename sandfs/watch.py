"""`sandfs status --watch`: a live table of a mount's tasks and daemon, redrawn every few
seconds from status.json. Rates (batches/s) come from the change between two reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sandfs.errors import UserError


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of status.json (`status` None when the daemon did not answer: `error` says)."""

    at: float  # time.monotonic() when it was read
    status: dict | None
    error: str = ""


def ratio(part: float, whole: float) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def saving(independent: int, decoded: int) -> str:
    """How many times fewer frames were decoded than independent loading would decode."""
    return f"{independent / decoded:.2f}x fewer frames" if decoded else "-"


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


def batches_per_second(task: str, now: Reading, before: Reading | None) -> str:
    """Views served per second between the two readings; "-" without an earlier one."""
    if before is None or before.status is None or task not in before.status["tasks"]:
        return "-"
    seconds = now.at - before.at
    served = (now.status["tasks"][task]["views_served"]
              - before.status["tasks"][task]["views_served"])
    return f"{served / seconds:.1f}" if seconds > 0 else "-"


def task_table(now: Reading, before: Reading | None) -> Table:
    table = Table(title="tasks", title_justify="left")
    names = list(now.status["tasks"])
    # the task's name in full, whatever the width: the other columns fold instead
    table.add_column("task", no_wrap=True, min_width=max(map(len, names), default=4))
    for column in ("epoch", "iteration", "ready ahead", "served", "batches/s",
                   "reads waited s"):
        table.add_column(column, justify="right")
    for name, task in now.status["tasks"].items():
        table.add_row(name, f"{task['epoch']}/{task['epochs']}",
                      f"{task['iteration']}/{task['iterations_per_epoch']}",
                      str(task["ready_ahead"]), str(task["views_served"]),
                      batches_per_second(name, now, before), f"{task['stall_seconds']:.2f}")
    return table


def failures(status: dict) -> int:
    cache, remote = status["cache"], status.get("remote", {})
    return (len(status["bad_videos"]) + len(status.get("task_errors", {}))
            + sum(cache.get(key, 0) for key in ("corrupt_detected", "enospc",
                                                 "write_failures", "no_room"))
            + remote.get("errors", 0))


def daemon_table(status: dict) -> Table:
    cache, queues = status["cache"], status["queues"]
    hits, misses = cache.get("hits", 0), cache.get("misses", 0)
    rows = [
        ("frames decoded", f"{status['frames_decoded']:,} (independent loading: "
                           f"{status['frames_decoded_independent']:,})"),
        ("decoding saved", saving(status["frames_decoded_independent"],
                                  status["frames_decoded"])),
        ("views materialized", f"{status['views_materialized']:,}"),
        ("cache hit rate", ratio(hits, hits + misses)),
        ("cache bytes", f"{mib(cache.get('bytes_used', 0))} of "
                        f"{mib(cache.get('budget_bytes', 0))}"),
        ("queues", f"demand {queues['demand']}, prematerialize {queues['prematerialize']}"),
        ("memory", f"{mib(status['memory_bytes'])} of {mib(status['memory_limit_bytes'])}"),
        ("failures", str(failures(status))),
    ]
    table = Table(title=f"daemon pid {status['pid']}, up {status['uptime_seconds']:.0f}s, "
                        f"{status['workers']} workers", title_justify="left", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def render_watch(mountpoint: str, now: Reading, before: Reading | None) -> Group:
    """The whole screen for one refresh."""
    if now.status is None:
        return Group(Text(f"not answering: {now.error}", style="bold red"))
    return Group(Text(mountpoint, style="bold"), task_table(now, before),
                 daemon_table(now.status))


def take_reading(read: Callable[[], dict]) -> Reading:
    try:
        return Reading(time.monotonic(), read())
    except UserError as exc:
        return Reading(time.monotonic(), None, str(exc))


def watch(mountpoint: str, read: Callable[[], dict], interval: float,
          iterations: int | None = None, console: Console | None = None) -> int:
    """Redraw until Ctrl-C (exit status 0) or after `iterations` refreshes. On a terminal the
    table is redrawn in place; into a pipe or file each refresh is appended (a log)."""
    console = console or Console()
    before: Reading | None = None
    done = 0
    try:
        with Live(console=console, auto_refresh=False, transient=not console.is_terminal) as live:
            while iterations is None or done < iterations:
                now = take_reading(read)
                screen = render_watch(mountpoint, now, before)
                if console.is_terminal:
                    live.update(screen, refresh=True)
                else:
                    console.print(screen)
                    console.file.flush()
                before = now if now.status is not None else before
                done += 1
                if iterations is None or done < iterations:
                    time.sleep(max(interval - (time.monotonic() - now.at), 0))
    except KeyboardInterrupt:
        pass
    return 0
