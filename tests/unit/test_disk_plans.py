"""The board's disk plans (`sched/diskplans.py`): each window's parts' plans, the latest
first; frames on disk kept through pruning's refinement; a window dropped takes its plans."""

from __future__ import annotations

import pytest

from sandfs.sched.diskplans import DiskPlans
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.objects import DiskPlan, Spot


def spots(*slots: int) -> set[Spot]:
    return {Spot("batch", slot) for slot in slots}


def test_a_job_s_plan_is_its_latest_part_s_with_frames_on_disk_kept():
    plans = DiskPlans()
    plans.add(0, {"a": DiskPlan(spots(1)), "b": DiskPlan(spots(2))}, ())
    plans.add(0, {"a": DiskPlan(spots(3))}, {"c"})  # the window's rest
    plans.add(1, {"a": DiskPlan(spots(4), frames=True)}, ())
    assert dict(plans) == {VideoJobKey(0, "a"): DiskPlan(spots(3)),
                           VideoJobKey(0, "b"): DiskPlan(spots(2)),
                           VideoJobKey(0, "c"): DiskPlan(frames=True),
                           VideoJobKey(1, "a"): DiskPlan(spots(4), frames=True)}
    assert plans.get(VideoJobKey(0, "d")) is None and len(plans) == 4
    plans.refine(0, {"b": DiskPlan(spots(5))})  # pruning decided: c's frames stay kept
    plans.refine(1, {})  # a's frames were kept: they stay
    assert dict(plans) == {VideoJobKey(0, "b"): DiskPlan(spots(5)),
                           VideoJobKey(0, "c"): DiskPlan(frames=True),
                           VideoJobKey(1, "a"): DiskPlan(frames=True)}
    plans.drop(0)
    assert list(plans) == [VideoJobKey(1, "a")]
    with pytest.raises(KeyError):
        plans[VideoJobKey(0, "c")]
