"""A window pruned a chunk of videos at a time (`pruning.pruned_plans`) keeps what it keeps
pruned whole, on random windows whose videos span several chunks; its chunks' columns are read
as their uses are one at a time; and it holds a chunk's graphs at a time, not the window's
(tracemalloc's peak, bytes a clip)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from sandfs.plan.window import plan_window
from sandfs.plan.windowvideos import ColumnRun
from sandfs.sched import pruning
from sandfs.sched.objects import leaves_nbytes
from sandfs.sched.pruneread import WindowReader
from sandfs.sched.pruning import pruned_plans
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_snapshot_after_leaving import window_of
from tests.unit.test_window_pruning import _read_rows, random_window, reference

# a window of 4,000 videos in chunks of 128: ~110 bytes a clip; read whole, ~1,300
PEAK_BYTES_PER_CLIP = 150


@pytest.mark.parametrize("parts", [2, 3, 1000])
@pytest.mark.parametrize("trial", range(6))
def test_a_window_pruned_in_chunks_keeps_what_it_keeps_whole(tmp_path, monkeypatch, trial,
                                                             parts):
    """Planned random windows of 1-3 tasks sharing frames, in chunks of a `parts`-th of their
    videos (a video at least): the disk plans of the window read at once, and of `prune` over
    each video's graph."""
    window = random_window(tmp_path, trial)
    chunk = max(1, -(-len(window.videos) // parts))
    assert len(window.videos) > chunk
    total = leaves_nbytes(window)
    rooms = [int(total * share) for share in (0.9, 0.5, 0.2)]
    whole = [pruned_plans(window, room) for room in rooms]
    monkeypatch.setattr(pruning, "_CHUNK", chunk)
    for room, kept in zip(rooms, whole, strict=True):
        assert pruned_plans(window, room) == kept == reference(window, room), room


@pytest.mark.parametrize("trial", range(4))
def test_a_chunk_s_columns_read_what_its_uses_read_one_at_a_time(tmp_path, monkeypatch, trial):
    """`WindowReader` (a run of a chunk's columns, in numpy; the tables and batch rows found
    by the chunks before) reads each chunk's uses as `use_rows` reads them a use at a time."""
    window = random_window(tmp_path, trial)
    monkeypatch.setattr(pruning, "_CHUNK", 2)
    reader = WindowReader(window)
    pieces = list(pruning._pieces(window.videos))
    assert len(pieces) > 1 and all(isinstance(piece, ColumnRun) for piece in pieces)
    for piece in pieces:
        rows = reader.run_chunk(piece).rows
        one_at_a_time = pruning.use_rows(window, [window.videos[p] for p in piece.paths])
        assert rows is not None and _read_rows(rows) == _read_rows(one_at_a_time)


@pytest.mark.parametrize("joiner", [False, True], ids=["planned", "joiner"])
def test_a_window_with_batches_left_out_is_pruned_in_chunks(tmp_path, monkeypatch, joiner):
    """A snapshot leaves out the batches of a task that left as it was taken: its chunk's
    columns are read without them (a byte a batch), each video's uses left, as `prune` over
    its graph keeps them."""
    window, _ = window_of(tmp_path, joiner)
    theirs = {key for key in window.views if {t for t, _ in window.readers[key]} == {"leaves"}}
    window.videos = window.videos.kept_only(lambda key: key not in theirs)
    assert any(getattr(run, "gone", None) is not None for run in window.videos.column_runs())
    total = leaves_nbytes(window)
    for chunk in (1, 7, 4096):
        monkeypatch.setattr(pruning, "_CHUNK", chunk)
        for share in (0.6, 0.25):
            room = int(total * share)
            assert pruned_plans(window, room) == reference(window, room), (chunk, share)


def test_pruning_peak_bytes_a_clip(tmp_path, monkeypatch):
    """A chunk's graphs and walks are let go as the next chunk is read: what stays is a few
    numbers a clip (its drop steps, the stacked tables' columns)."""
    window = plan_window([make_plan(tmp_path, fake_videos(4000))], 0)
    clips = sum(len(work.uses) for work in window.videos.values())
    room = leaves_nbytes(window) // 2
    monkeypatch.setattr(pruning, "_CHUNK", 128)
    pruned_plans(window, room)  # what is made once a window (its columns' caches) made before
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        kept = pruned_plans(window, room)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert clips > 5_000 and kept
    assert peak / clips <= PEAK_BYTES_PER_CLIP, f"{peak / clips:.0f} bytes a clip"
