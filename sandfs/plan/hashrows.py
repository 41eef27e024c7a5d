"""Rows found by their keys' hashes: a sorted column of hashes and the keys in that order, not a
dict (a dict entry and its table are ~50-100 bytes a key; these 16). For the columns a window
keeps per batch or per video (`viewjobs`, `diskplans`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

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
