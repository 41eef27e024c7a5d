"""Views that could not be planned (a branch condition failed at run time), per task: their
reads answer EIO and status.json reports how many and why. Only those views fail; the task's
other views and every other task go on."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskFailures:
    """What status.json shows for one task."""

    failed_views: int
    first_reason: str | None


class ViewFailures:
    def __init__(self) -> None:
        self._by_task: dict[str, dict[tuple[int, int], str]] = {}

    def record(self, task: str, epoch: int, iteration: int, reason: str) -> None:
        views = self._by_task.setdefault(task, {})
        if (epoch, iteration) not in views:
            views[(epoch, iteration)] = reason
            log.error("task %s view %d/%d failed: %s", task, epoch, iteration, reason)

    def of(self, task: str) -> TaskFailures:
        views = self._by_task.get(task, {})
        return TaskFailures(len(views), next(iter(views.values()), None))

    def forget(self, task: str) -> None:
        self._by_task.pop(task, None)
