"""Single flight and remembered failures, keyed by object: the one store both the batch board
and the on-demand objects use. A reader waits on a key's event until the object is settled
(made, dropped or failed); a failure is remembered and re-raised on every read, never retried."""

from __future__ import annotations

from collections.abc import Hashable

import trio


class ObjectFailed(Exception):
    """Materializing an object failed; the reason is remembered and re-raised on every read."""


class Flights:
    def __init__(self) -> None:
        self._events: dict[Hashable, trio.Event] = {}
        self._failed: dict[Hashable, str] = {}

    def in_flight(self, key: Hashable) -> bool:
        return key in self._events

    def event(self, key: Hashable) -> trio.Event:
        """The event a reader of `key` waits on (one per flight, whoever asks)."""
        return self._events.setdefault(key, trio.Event())

    def settle(self, key: Hashable) -> None:
        """Wake every reader of `key`: it is made, failed, or no longer planned."""
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def fail(self, key: Hashable, reason: str) -> None:
        self._failed[key] = reason
        self.settle(key)

    def failed(self, key: Hashable) -> bool:
        return key in self._failed

    def check(self, key: Hashable) -> None:
        """Raise ObjectFailed for a key that failed."""
        if key in self._failed:
            raise ObjectFailed(self._failed[key])
