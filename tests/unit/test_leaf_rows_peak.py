"""A window's leaf rows (`sched.leafrows.leaf_rows`) are made in narrow columns, their parts
let go as they are joined, and their batches' keys made only when read: tracemalloc's peak
while they are made stays within bytes a clip (a 250,000-video window has 1.25M clips)."""

from __future__ import annotations

import gc
import tracemalloc

from sandfs.plan.window import plan_window
from sandfs.sched.leafrows import leaf_rows
from tests.helpers.plans import fake_videos, make_plan

# ~85 bytes a clip here; int64 columns, a key a batch and an int a video made ~180
PEAK_BYTES_PER_CLIP = 120


def test_leaf_rows_peak_bytes_a_clip(tmp_path):
    window = plan_window([make_plan(tmp_path, fake_videos(4000))], 0)
    clips = sum(len(work.uses) for work in window.videos.values())
    leaf_rows(window)  # what is made once a window (its columns' caches) made before
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        rows = leaf_rows(window)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(rows.view) == clips > 5_000
    assert peak / clips <= PEAK_BYTES_PER_CLIP, f"{peak / clips:.0f} bytes a clip"
