"""The in-memory index of stored objects and the eviction policies over it (not thread-safe: the
store holds its lock around every call).

Eviction follows SAND §6: first objects that are done (used and not needed again), oldest first;
then objects whose deadline is farthest, but only those farther than the deadline of the object
that needs the room (evicting a nearer one to keep a farther one would only cause a recompute
sooner). Each policy is a named function that picks one victim, so eviction is incremental.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sandfs.cache.keys import ObjectKey


@dataclass(slots=True)
class Entry:
    key: ObjectKey
    fmt: str
    file_nbytes: int  # header + payload, the file's size
    disk_nbytes: int  # file_nbytes rounded up to whole blocks: what the budget is charged
    deadline: float = math.inf
    done: bool = False
    generation: int = 0  # tells a re-put object from the one a reader looked up


class Index:
    def __init__(self) -> None:
        self.entries: dict[ObjectKey, Entry] = {}
        self.disk_nbytes = 0
        self.done_nbytes = 0  # of the done entries: the first to evict
        self._done: dict[ObjectKey, None] = {}  # insertion order: the oldest done first
        # (-deadline, sequence, key, deadline); stale items are skipped when they surface
        self._by_deadline: list[tuple[float, int, ObjectKey, float]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: ObjectKey) -> bool:
        return key in self.entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    def get(self, key: ObjectKey) -> Entry | None:
        return self.entries.get(key)

    def add(self, entry: Entry) -> None:
        if entry.key in self.entries:
            raise KeyError(f"{entry.key} is already indexed")
        entry.generation = next(self._sequence)
        self.entries[entry.key] = entry
        self.disk_nbytes += entry.disk_nbytes
        if entry.done:
            self._done[entry.key] = None
            self.done_nbytes += entry.disk_nbytes
        else:
            self._push_deadline(entry)

    def remove(self, key: ObjectKey) -> Entry:
        entry = self.entries.pop(key)
        self.disk_nbytes -= entry.disk_nbytes
        if entry.done:
            del self._done[key]
            self.done_nbytes -= entry.disk_nbytes
        return entry

    def set_deadline(self, key: ObjectKey, deadline: float) -> bool:
        entry = self.entries.get(key)
        if entry is None:
            return False
        entry.deadline = deadline
        if entry.done:
            entry.done = False
            del self._done[key]
            self.done_nbytes -= entry.disk_nbytes
        self._push_deadline(entry)
        return True

    def mark_done(self, key: ObjectKey) -> bool:
        entry = self.entries.get(key)
        if entry is None:
            return False
        if not entry.done:
            entry.done = True
            self._done[key] = None
            self.done_nbytes += entry.disk_nbytes
        return True

    def done_keys(self) -> list[ObjectKey]:
        return list(self._done)

    def count_by_kind(self) -> dict[str, int]:
        return dict(Counter(entry.key.kind for entry in self.entries.values()))

    def nbytes_by_format(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for entry in self.entries.values():
            totals[entry.fmt] += entry.disk_nbytes
        return dict(totals)

    def oldest_done(self) -> ObjectKey | None:
        return next(iter(self._done), None)

    def farthest_deadline(self) -> Entry | None:
        """The not-done entry with the farthest deadline (ties: the earliest indexed)."""
        heap = self._by_deadline
        while heap:
            _, _, key, deadline = heap[0]
            entry = self.entries.get(key)
            if entry is not None and not entry.done and entry.deadline == deadline:
                return entry
            heapq.heappop(heap)
        return None

    def _push_deadline(self, entry: Entry) -> None:
        if len(self._by_deadline) > 2 * len(self.entries) + 64:
            self._compact()
        heapq.heappush(self._by_deadline,
                       (-entry.deadline, next(self._sequence), entry.key, entry.deadline))

    def _compact(self) -> None:
        """Drops stale heap items, so that deadline updates do not grow the heap forever."""
        self._by_deadline = [
            item for item in self._by_deadline
            if (entry := self.entries.get(item[2])) is not None and entry.deadline == item[3]
        ]
        heapq.heapify(self._by_deadline)


def _pick_done(index: Index, incoming_deadline: float) -> ObjectKey | None:
    return index.oldest_done()


def _pick_farthest_deadline(index: Index, incoming_deadline: float) -> ObjectKey | None:
    entry = index.farthest_deadline()
    if entry is None or entry.deadline <= incoming_deadline:
        return None
    return entry.key


# (name, pick): tried in order; each pick returns one victim or None when it has none left
EVICTION_POLICIES: tuple[tuple[str, Callable[[Index, float], ObjectKey | None]], ...] = (
    ("done", _pick_done),
    ("farthest_deadline", _pick_farthest_deadline),
)
