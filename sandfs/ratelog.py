"""A log that says at most so much per period: a scan over hundreds of thousands of files
(or one left walking a dead mount) must not write a warning for each (one line says how
many were dropped)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    """At most `burst` warnings per `period_s`; then one line with how many were dropped."""

    def __init__(self, logger: logging.Logger, *, burst: int = 20, period_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.burst, self.period_s, self.clock = logger, burst, period_s, clock
        self._lock = threading.Lock()  # scans log from worker threads
        self._started = clock()
        self._sent = self._dropped = 0

    def warning(self, message: str, *args: object) -> None:
        with self._lock:
            now = self.clock()
            if now - self._started >= self.period_s:
                if self._dropped:
                    self.logger.warning("%d more such warnings dropped in %.0f s",
                                        self._dropped, now - self._started)
                self._started, self._sent, self._dropped = now, 0, 0
            if self._sent >= self.burst:
                self._dropped += 1
                return
            self._sent += 1
        self.logger.warning(message, *args)
