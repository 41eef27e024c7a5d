"""Rows found by their keys' hashes: a sorted column of hashes and the keys in that order, not a
dict (a dict entry and its table are ~50-100 bytes a key; these 16). For the columns a window
keeps per batch or per video (`viewjobs`, `diskplans`); numbers by hash alone where the keys are
held elsewhere (`HashNumbers`: a window's videos, its pending jobs)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence

import numpy as np


class HashRows:
    """Keys sorted by hash, a row each."""

    __slots__ = ("_hashes", "keys")

    def __init__(self, hashes: np.ndarray, keys: list) -> None:
        self._hashes, self.keys = hashes, keys

    @classmethod
    def of(cls, keys: Sequence[Hashable]) -> tuple[HashRows, np.ndarray]:
        """The rows of `keys`, and each row's index among `keys` (to order other columns)."""
        hashes = np.fromiter(map(hash, keys), np.int64, len(keys))
        order = np.argsort(hashes, kind="stable")
        return cls(hashes[order], [keys[i] for i in order.tolist()]), order

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, key: Hashable) -> int:
        """The key's row; -1 if it is not one of the keys."""
        wanted = hash(key)
        row = int(np.searchsorted(self._hashes, wanted))
        while row < len(self._hashes) and self._hashes[row] == wanted:  # a collision: next
            if self.keys[row] == key:
                return row
            row += 1
        return -1

    def rows(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Each key's row (-1: not one of the keys), the hashes looked up at once."""
        wanted = np.fromiter(map(hash, keys), np.int64, len(keys))
        found = np.full(len(keys), -1, np.int64)
        if not len(self._hashes):
            return found
        at = np.searchsorted(self._hashes, wanted)
        near = np.flatnonzero(self._hashes[np.minimum(at, len(self._hashes) - 1)] == wanted)
        for index in near.tolist():  # a hash found: the key itself, or a collision's
            found[index] = self.row(keys[index])
        return found


class HashNumbers:
    """Numbers found by their keys' hashes: the hashes sorted beside each key's number, no key
    held (12 bytes a key: the caller checks a number's key, as a hash may collide). One for a
    window's videos and one for its pending jobs, whatever the parts it was planned in: a
    part's keys join in one merge, into new columns (a copy sharing the old ones keeps
    them)."""

    __slots__ = ("_hashes", "_numbers")

    def __init__(self, hashes: np.ndarray | None = None, numbers: np.ndarray | None = None
                 ) -> None:
        self._hashes = np.zeros(0, np.int64) if hashes is None else hashes
        self._numbers = np.zeros(0, np.int32) if numbers is None else numbers

    def __len__(self) -> int:
        return len(self._hashes)

    def joined(self, hashes: np.ndarray, numbers: np.ndarray) -> HashNumbers:
        """These keys' `hashes` and `numbers` too, after those with the same hash."""
        by = np.argsort(hashes, kind="stable")
        at = self._hashes.searchsorted(hashes[by], "right")
        return HashNumbers(np.insert(self._hashes, at, hashes[by]),
                           np.insert(self._numbers, at, numbers[by].astype(np.int32)))

    def numbers(self, key: Hashable) -> Iterator[int]:
        """The numbers with `key`'s hash, in the order they joined: its, or a collision's."""
        wanted, hashes = hash(key), self._hashes
        row = int(hashes.searchsorted(wanted))
        while row < len(hashes) and hashes[row] == wanted:
            yield int(self._numbers[row])
            row += 1

    def held(self, hashes: np.ndarray) -> list[int]:
        """Which of `hashes` are held (searched at once): their keys', or a collision's."""
        if not len(self._hashes):
            return []
        at = np.minimum(self._hashes.searchsorted(hashes), len(self._hashes) - 1)
        return np.flatnonzero(self._hashes[at] == hashes).tolist()


def hashes_of(keys: Iterable[Hashable], count: int) -> np.ndarray:
    """The `count` keys' hashes, a column."""
    return np.fromiter(map(hash, keys), np.int64, count)
