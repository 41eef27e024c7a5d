"""Which videos of a window planned in parts come next (docs/contract.md#lazy-scan).

A large window where a task stands is planned in parts that follow its readers: its lead part
(the videos of each task's next batches), then the unplanned videos of the batches read next,
as many as the window holds planned already, then the rest once that is half of what is left.
Each video comes with all its clips in the window (one pass a video a window), so a part waits
for its videos' probes and those of the batches they share in the window's other epochs; a
cold mount's reader of batch N waits for the parts up to N's, not for the whole scan. The
parts double: planning a part scans the window's batches, so N parts of one size would scan
them N times. Pure: the planner calls it in its planning thread, the tasks steady.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sandfs.plan.task import TaskPlan


def next_part(plans: Sequence[TaskPlan], positions: Mapping[str, int], window: int,
              planned: frozenset[str], least: int) -> frozenset[str] | None:
    """The videos of the window's next part (`least` at the fewest), from where each task
    stands (`positions`: batches read); None: plan the rest."""
    plans = [p for p in plans if p.window_epochs(window)]
    want = max(len(planned), least)
    if 2 * want >= sum(len(p.listed) for p in plans) - len(planned):
        return None
    part: set[str] = set()
    for plan in plans:
        index = positions[plan.name]
        end = plan.window_epochs(window).stop * plan.iterations_per_epoch
        while index < end and len(part) < want:
            epoch, iteration = divmod(index, plan.iterations_per_epoch)
            if plan.window_of(epoch) == window:
                part |= {path for i in plan.batch_slots(epoch, iteration)
                         if (path := plan.listed[i].path) not in planned}
            index += 1
    return frozenset(part) or None


def lead_part(plans: Iterable[TaskPlan], positions: Mapping[str, int], window: int,
              least_clips: int, batches: int) -> frozenset[str] | None:
    """The videos of the next `batches` batches of each task standing in the window, when the
    tasks' part of the window holds `least_clips` clips or more (None: plan it whole)."""
    plans = [p for p in plans if p.window_epochs(window)]
    clips = sum(len(p.window_epochs(window)) * len(p.videos) * p.sampling.samples_per_video
                for p in plans)
    if clips < least_clips:
        return None
    lead: set[str] = set()
    for plan in plans:
        at = positions[plan.name]
        for index in range(at, at + batches):
            epoch, iteration = divmod(index, plan.iterations_per_epoch)
            if epoch < plan.epochs and plan.window_of(epoch) == window:
                lead |= {plan.listed[i].path for i in plan.batch_slots(epoch, iteration)}
    return frozenset(lead) or None
