"""How much the object store keeps when the user gives no storage budget.

Most objects live seconds to minutes: clips waiting for their batch, frames carried to the
next window. The kernel writes a file's pages to disk once the machine's dirty pages pass its
background threshold (or after ~30 s); an object deleted before that is never written at all.
A store far larger than that threshold keeps objects every reader has read, and the kernel
then writes everything the run makes: a 100-epoch run wrote 22 GB and stalled its writes in
the kernel's dirty throttling, 0.81-0.83 of the ideal against 0.97 with a store that stayed
under the threshold (docs/performance.md#the-store-and-the-disk).

So, unless a budget is given, the store keeps the larger of that threshold and what the run
needs (STORE_WINDOWS windows of every distinct task's batches), within the storage budget's
default (the disk bound). A given budget is the user's choice to keep more (later trials,
restarts): the store may fill it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sandfs.plan.task import TaskPlan

# the window being read, the next one being made, and room for frames carried ahead
STORE_WINDOWS = 3
MIN_STORE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class StoreSizing:
    """`budget_bytes`: the disk bound. `given`: the user set it (the store fills it);
    otherwise the store keeps `max(writeback_bytes, the run's need)` within it."""
    budget_bytes: int
    given: bool
    writeback_bytes: int
    floor_bytes: int = MIN_STORE_BYTES

    def store_bytes(self, plans: Iterable[TaskPlan]) -> int:
        if self.given:
            return self.budget_bytes
        wanted = max(self.writeback_bytes, STORE_WINDOWS * window_nbytes(plans), self.floor_bytes)
        return min(self.budget_bytes, wanted)


def window_nbytes(plans: Iterable[TaskPlan]) -> int:
    """The bytes of one window's batches, counted once for tasks that share their objects
    (a search's identical trials)."""
    distinct = {plan.sharing_key: plan for plan in plans}
    return sum(plan.k_epochs * plan.iterations_per_epoch * plan.view_nbytes(0, 0)
               for plan in distinct.values())


def writeback_threshold(vm_dir: str = "/proc/sys/vm", meminfo: str = "/proc/meminfo") -> int:
    """Dirty bytes past which the kernel starts writing them to disk: vm.dirty_background_bytes,
    or vm.dirty_background_ratio percent of the memory available (the kernel counts free and
    file-cache pages, which MemAvailable approximates). 0 where they cannot be read."""
    try:
        fixed = _read_int(os.path.join(vm_dir, "dirty_background_bytes"))
        if fixed > 0:
            return fixed
        ratio = _read_int(os.path.join(vm_dir, "dirty_background_ratio"))
        with open(meminfo) as f:
            available = next(int(line.split()[1]) * 1024 for line in f
                             if line.startswith("MemAvailable:"))
    except (OSError, ValueError, StopIteration, IndexError):
        return 0
    return available * ratio // 100


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())
