"""bench_e2e's ideal feed comes from the sandfs pass itself: every batch as fast as those that
were ready when opened, each reader's own time per batch kept; none when no batch was."""

from __future__ import annotations

import pytest
from bench_e2e import ideal_record


def trainer(waits: list[float], ready: list[bool], own_s: float) -> dict:
    """A reader that waited `waits` and spent `own_s` a batch on its own (checks, GPU step)."""
    return {"waits_s": waits, "ready_at_open": ready, "started": 0.0,
            "finished": sum(waits) + own_s * len(waits)}


def test_the_ideal_takes_the_median_wait_of_ready_batches():
    run = {"trainers": [trainer([0.5, 0.01, 0.03, 0.02], [False, True, True, True], 0.04),
                        trainer([0.4, 0.02], [False, True], 0.08)]}
    ideal = ideal_record(run, gpu_s=0.04)
    assert ideal["ready_views"] == 4 and ideal["wait_ms_ready"] == 20.0
    assert ideal["batches_per_s"] == pytest.approx(1 / 0.06 + 1 / 0.10, abs=1e-3)
    assert ideal["gpu_busy"] == pytest.approx((0.04 / 0.06 + 0.04 / 0.10) / 2, abs=1e-3)


def test_without_a_ready_batch_there_is_no_ideal():
    ideal = ideal_record({"trainers": [trainer([0.2, 0.3], [False, False], 0.0)]}, gpu_s=0.0)
    assert ideal["batches_per_s"] is None and ideal["ready_views"] == 0
