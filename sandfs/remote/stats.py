"""What fetching remote datasets did, for `status.json`: a record of its own so that the
daemon reports it (zeros for local data) without importing the fetching machinery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RemoteStats:
    """Counters of one prepare (`status.json`'s `remote`): video bytes received, requests made
    (listings, HEADs, GETs), failed requests, retries; files fetched, reused from an earlier
    fetch, and found changed on the store since they were fetched or listed."""

    bytes_fetched: int = 0
    requests: int = 0
    errors: int = 0
    retries: int = 0
    files_fetched: int = 0
    files_reused: int = 0
    files_changed: int = 0

    def __add__(self, other: RemoteStats) -> RemoteStats:
        return RemoteStats(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def _values(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def as_status(self) -> dict[str, int]:
        return dict(zip(self.__slots__, self._values(), strict=True))
