"""A batch made and in memory, as the board keeps it until it is evicted: its buffer, the
tasks still to read it, and whether anything but the board refers to its buffer."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from sandfs.plan.task import ViewPlan


@dataclass(slots=True)
class ReadyView:
    whole: np.ndarray  # the .npy file; the board keeps no other reference to its memory
    readers_left: set[str]  # tasks that will read it and have not yet
    view: ViewPlan | None = None  # its plan, to mark its clips read once every reader has it

    @property
    def data(self) -> memoryview:
        """A memoryview of its own for each reader: its managed buffer, which it shares with
        every slice and `memoryview()` of it, holds a reference to `whole` while any of them
        lives. Handing out one memoryview to all would hide its slices from `unshared`."""
        return memoryview(self.whole)

    @property
    def nbytes(self) -> int:
        return len(self.whole)

    def unshared(self) -> bool:
        """Does nothing but this batch refer to its buffer? Whatever can read it — a
        reader's memoryview or a slice of it (a file handle's data, a reply being sent), a
        numpy view, a worker's target array — holds a reference to `whole`, directly or
        through its base or managed buffer, and only this trio thread hands out new ones."""
        return _references(self) <= _ALONE


def _references(ready: ReadyView) -> int:
    return sys.getrefcount(ready.whole)


# what `_references` counts for a buffer held by a ready batch alone (measured, not assumed:
# what the interpreter counts for the call's own argument varies between versions)
_ALONE = _references(ReadyView(np.empty(1, np.uint8), set()))
