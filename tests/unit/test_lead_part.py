"""A window's lead part (`plan_window(lead=...)`): the batches holding a lead video, found from
the lead videos' places in each epoch's order rather than a walk of every batch of the window,
and the same views, readers and clips as the whole window keeps for them."""

from __future__ import annotations

import random

import pytest

from sandfs.plan.task import TaskPlan
from sandfs.plan.window import plan_window
from tests.helpers.plans import fake_videos, make_plan

CASES = [
    {},
    {"sampling": {"videos_per_batch": 3, "drop_last": True}},
    {"sampling": {"shard": {"world_size": 3, "rank": 2}}},
    {"sampling": {"videos_per_batch": 4, "samples_per_video": 2}},
]


def lead_of(plan: TaskPlan, seed: int) -> frozenset[str]:
    """A few videos, some of them in no batch of a shard's epochs."""
    rng = random.Random(seed)
    return frozenset(v.path for v in rng.sample(plan.listed, 5))


def kept_for(whole, lead: frozenset[str]) -> tuple:
    """What the whole window holds for the batches with a lead video, and the lead's clips."""
    views = {k for w in whole.videos.values() if w.info.path in lead for u in w.uses
             for k in [u.view]}
    return (views, {k: whole.readers[k] for k in views},
            {p: [(u.view, u.slot, u.clip, u.readers) for u in w.uses]
             for p, w in whole.videos.items() if p in lead})


@pytest.mark.parametrize("overrides", CASES, ids=["plain", "drop_last", "shard", "samples"])
def test_the_lead_part_is_the_whole_window_s_batches_with_a_lead_video(tmp_path, overrides):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    videos = fake_videos(37)
    plan = make_plan(tmp_path / "a", videos, epochs=4, **overrides)
    twin = make_plan(tmp_path / "b", videos, task="twin", epochs=4, **overrides)
    for seed in range(3):
        lead = lead_of(plan, seed)
        for window in (0, 1):
            part = plan_window([plan, twin], window, lead=lead)
            whole = plan_window([plan, twin], window)
            views, readers, uses = kept_for(whole, lead)
            assert set(part.views) == views and part.readers == readers
            assert {p: [(u.view, u.slot, u.clip, u.readers) for u in w.uses]
                    for p, w in part.videos.items()} == uses


def test_the_lead_part_reads_only_its_own_batches(tmp_path, monkeypatch):
    """The lead part of 2,000 videos looks up only the batches it plans, not every batch of
    the window."""
    plan = make_plan(tmp_path, fake_videos(2000), epochs=2)
    lead = frozenset(plan.listed[i].path for i in plan.batch_slots(0, 0))
    looked: list = []
    slots = plan.batch_slots
    monkeypatch.setattr(plan, "batch_slots", lambda *a: looked.append(a) or slots(*a))
    part = plan_window([plan], 0, lead=lead)
    assert len(part.views) <= 2 * len(lead)  # one batch an epoch a video at most
    # drawn, planned, and the listed videos its slots hold (a bad one's hold a stand-in's)
    assert len(looked) <= 3 * len(part.views), len(looked)
