"""One object for equal values, for the clips of a planned window."""

from __future__ import annotations

INTERNED_MAX = 1 << 16  # distinct values an Interner keeps at once


class Interner:
    """One object for equal values: the clips of a window share their frame lists, op
    instances (a flip has two, a crop a few thousand places) and branch records instead of
    each holding its own, 1,356 bytes a clip before
    (docs/performance.md#planning-and-scheduling-at-scale). Cleared when
    full: draws of continuous values (a random resized crop's scale) never repeat, and clips
    keep what they hold."""

    def __init__(self) -> None:
        self._values: dict = {}

    def __call__(self, value):
        found = self._values.get(value)
        if found is None:
            if len(self._values) >= INTERNED_MAX:
                self._values.clear()
            found = self._values[value] = value
        return found
