"""A window's leaf rows (`sched.leafrows.leaf_rows`) are made in narrow columns, their parts
let go as they are joined, and their batches' keys made only when read: tracemalloc's peak
while they are made stays within bytes a clip (a 250,000-video window has 1.25M clips),
whether the window was planned whole or in parts."""

from __future__ import annotations

import gc
import tracemalloc

from sandfs.plan.window import plan_window
from sandfs.sched import leafrows, work
from sandfs.sched.leafrows import leaf_rows, leaf_total
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, make_plan

# ~85 bytes a clip here; int64 columns, a key a batch and an int a video made ~180
PEAK_BYTES_PER_CLIP = 120
# the batches' index, first readers and bytes, each clip table's frame counts: ~59 bytes a
# clip here in parts (their batches found by key), ~27 whole; the window's rows first, 82-107
TOTAL_PEAK_BYTES_PER_CLIP = 70


def in_parts(plan, parts: int):
    """Window 0 planned in `parts` parts as the daemon plans one: each part reads the batches
    the parts before resolved (`WindowPlanner.plan_active`), and their clip tables."""
    paths = [video.path for video in plan.listed]
    per, book, done = len(paths) // parts, WindowBook([plan]), frozenset()
    for k in range(parts):
        lead = frozenset(paths[k * per:(k + 1) * per])
        resolved = book.windows[0].view_plans if k else {}
        planned = work.plan_active_window([plan], 0, None, "leaves", lead=lead, skip=done,
                                          resolved=resolved)
        if k:
            book.extend(0, planned.plan)
        else:
            book.add_window(planned.plan)
        done |= lead
    return book.windows[0]


def _clips(window) -> int:
    return sum(len(video.uses) for video in window.videos.values())


def _peak_bytes_a_clip(window, read=lambda window: len(leaf_rows(window).view),
                       expected=_clips) -> float:
    """tracemalloc's peak while `read` reads the window, bytes a clip; what is made once a
    window (its columns' caches) made before, by `expected`'s and `leaf_rows`' reads."""
    clips, want = _clips(window), expected(window)
    leaf_rows(window)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        got = read(window)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert got == want > 0 and clips > 5_000
    return peak / clips


def test_leaf_rows_peak_bytes_a_clip(tmp_path):
    peak = _peak_bytes_a_clip(plan_window([make_plan(tmp_path, fake_videos(4000))], 0))
    assert peak <= PEAK_BYTES_PER_CLIP, f"{peak:.0f} bytes a clip"


def test_leaf_rows_of_a_window_in_parts_count_each_clip_table_once(tmp_path):
    """Each part's chunk reads the clip tables of the parts before: counting every table it
    reads, each chunk, grew with the parts (at 250,000 videos in 512 parts, 1.18 GB while a
    window's leaf rows were read)."""
    peak = _peak_bytes_a_clip(in_parts(make_plan(tmp_path, fake_videos(4000)), 40))
    assert peak <= PEAK_BYTES_PER_CLIP, f"{peak:.0f} bytes a clip"


def test_a_window_needs_no_rows_held_to_know_its_bytes(tmp_path, monkeypatch):
    """Whether a window needs pruning asks its clips' bytes only: summed a run of videos at a
    time, not read as the window's rows first (a 250,000-video daemon's RSS rose by ~80 MB
    there, beside two windows' plans)."""
    monkeypatch.setattr(leafrows, "_TOTAL_RUN", 250)  # 4,000 videos: 16 runs, as 1.25M clips
    plan = make_plan(tmp_path, fake_videos(4000))
    for window in (plan_window([plan], 0), in_parts(plan, 40)):
        peak = _peak_bytes_a_clip(window, leaf_total, lambda w: leaf_rows(w).total)
        assert peak <= TOTAL_PEAK_BYTES_PER_CLIP, f"{peak:.0f} bytes a clip"
