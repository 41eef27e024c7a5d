"""A video's frame pts, held compactly (FramePts)."""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence


class FramePts(Sequence):
    """A video's frame pts by frame index, held compactly: a constant-rate video's as runs of
    one step (three numbers a run), any other's as an array of int64. As a tuple, a 300-frame
    video's pts took 12.5 KB with their int objects: 2.9 GB for Kinetics-400's 240k videos, in
    the daemon and in the command that scans (docs/performance.md#memory). Immutable; equal to
    a sequence of the same numbers; `of` gives equal values one representation."""

    __slots__ = ("_len", "_runs", "_starts", "_values")
    RUNS_PER_FRAME = 0.125  # more runs than this: an array

    def __init__(self, runs: tuple[tuple[int, int, int], ...] = (),
                 values: array | None = None) -> None:
        self._runs, self._values = runs, values  # (first, step, count) each; or the array
        counts = [count for _, _, count in runs]
        self._starts = tuple(itertools.accumulate(counts, initial=0))[:-1]
        self._len = len(values) if values is not None else sum(counts)

    @classmethod
    def of(cls, values: Iterable[int]) -> FramePts:
        if isinstance(values, FramePts):
            return values
        values = tuple(values)
        if len(values) > 1 and (step := values[1] - values[0]) and values == tuple(
                range(values[0], values[0] + step * len(values), step)):
            return cls(runs=((values[0], step, len(values)),))  # one run: compared in C
        runs = _runs_of(values)
        if len(runs) > max(1, len(values) * cls.RUNS_PER_FRAME):
            return cls(values=array("q", values))
        return cls(runs=runs)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"frame index {index} out of range for {self._len} frames")
        if self._values is not None:
            return self._values[index]
        run = bisect_right(self._starts, index) - 1
        first, step, _ = self._runs[run]
        return first + (index - self._starts[run]) * step

    def __iter__(self) -> Iterator[int]:
        if self._values is not None:
            yield from self._values
            return
        for first, step, count in self._runs:
            yield from (first + j * step for j in range(count))

    def index_of(self, pts: int) -> int | None:
        """The index of the frame with this pts (increasing pts: a binary search), or None."""
        if len(self._runs) == 1 and self._runs[0][1] > 0:  # one constant step: arithmetic
            first, step, count = self._runs[0]
            index, off = divmod(pts - first, step)
            return index if off == 0 and 0 <= index < count else None
        position = bisect_left(self, pts)
        return position if position < self._len and self[position] == pts else None

    def one_run(self) -> tuple[int, int, int] | None:
        """(first, step, count) where the pts are one run of a constant step, else None."""
        return self._runs[0] if self._values is None and len(self._runs) == 1 else None

    def _key(self) -> tuple:
        return self._runs if self._values is None else tuple(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FramePts):
            return self._key() == other._key()
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"FramePts({list(self)!r})" if self._len <= 8 else f"FramePts({self._len} pts)"

    def __reduce__(self):
        return (FramePts, (self._runs, self._values))


def _runs_of(values: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    runs: list[list[int]] = []  # [first, step, count]
    for value in values:
        if runs:
            first, step, count = runs[-1]
            if count == 1:
                runs[-1][1:] = [value - first, 2]
                continue
            if value == first + step * count:
                runs[-1][2] += 1
                continue
        runs.append([value, 0, 1])
    return tuple((first, step, count) for first, step, count in runs)
