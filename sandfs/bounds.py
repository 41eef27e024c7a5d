"""Counting what each local user holds of the daemon (handles, uploads, tasks, registrations
being planned) against the mount's `Limits` (sandfs/config/limits.py), so that one user can
neither exhaust the daemon nor starve another. Root and the daemon's user are held to the
totals only."""

from __future__ import annotations

import errno
from collections import Counter

from sandfs.access import privileged
from sandfs.errors import UserError


class LimitReached(UserError):
    """A request past a limit: the FUSE layer answers `code`, status.json gives the reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.errno = code


class Quota:
    """How many of one resource each uid holds, within `per_uid` each and `total` in all."""

    def __init__(self, what: str, per_uid: int, total: int | None = None, *,
                 per_uid_errno: int = errno.EDQUOT, total_errno: int = errno.ENOSPC,
                 setting: str = "") -> None:
        self.what = what
        self.per_uid, self.total = per_uid, total
        self.per_uid_errno, self.total_errno = per_uid_errno, total_errno
        self.setting = setting  # the limits' name prefix, for the reason (e.g. "uploads")
        self.held: Counter[int] = Counter()

    def check(self, uid: int) -> None:
        """LimitReached when `uid` may take no more."""
        if self.total is not None and sum(self.held.values()) >= self.total:
            raise LimitReached(self.total_errno, f"{self.what}: the mount holds its limit of "
                                                 f"{self.total} ({self.setting}_total)")
        if not privileged(uid) and self.held[uid] >= self.per_uid:
            raise LimitReached(self.per_uid_errno, f"{self.what}: uid {uid} holds its limit of "
                                                   f"{self.per_uid} ({self.setting}_per_uid)")

    def take(self, uid: int) -> None:
        self.check(uid)
        self.held[uid] += 1

    def give(self, uid: int) -> None:
        self.held[uid] -= 1
        if self.held[uid] <= 0:
            del self.held[uid]
