"""Algorithm 1 over a window's columns (`prune_flat`) decides as `prune` does over the same
graphs: random flat windows (some videos' clips sharing frames enough to collapse, most not),
random budgets; and its recompute estimate against the independent reference. Walked a chunk of
videos at a time (`prune_chunks`), it decides as over the whole window."""

from __future__ import annotations

import numpy as np
import pytest

from sandfs.cache import flatprune
from sandfs.cache.flatprune import FlatGraphs, _Steps, _taken, prune_chunks, prune_flat
from sandfs.cache.prune import ObjectGraph, prune, recompute_seconds


def random_window(rng: np.random.Generator, videos: int, collapsible_share: float = 0.2
                  ) -> tuple[FlatGraphs, list[ObjectGraph]]:
    """Videos with 1-9 clips of 2-8 frames each (strided runs in 25-60 frames: overlapping
    clips share frames). A share of videos have small frames and many clips (collapses save),
    as many have frames as large as clips (they might), the rest larger frames (they cannot)."""
    clip_video, clip_nbytes, clip_seconds, clip_frames, frame_ids = [], [], [], [0], []
    frame_nbytes, frame_seconds, graphs = [], [], []
    for video in range(videos):
        draw = rng.random()
        collapsible = draw < collapsible_share
        span = int(rng.integers(25, 61))
        size = int(rng.integers(10, 40) if collapsible else rng.integers(200, 400)
                   if draw < 2 * collapsible_share else rng.integers(2000, 4000))
        decode = float(rng.choice([0.001, 0.003, rng.random() / 100]))
        parents, clip_bytes, seconds = [], [], []
        for _ in range(int(rng.integers(6, 16) if collapsible else rng.integers(1, 10))):
            count, stride = int(rng.integers(2, 9)), int(rng.integers(1, 4))
            start = int(rng.integers(0, span - (count - 1) * stride))
            parents.append([start + i * stride for i in range(count)])
            clip_bytes.append(int(rng.choice([0, 60, 100, 150, int(rng.integers(1, 300))],
                                             p=[0.05, 0.25, 0.25, 0.2, 0.25])))
            seconds.append(float(rng.choice([0.0005, 0.0005 * count, rng.random() / 1000])))
        used = sorted({f for p in parents for f in p})  # a frame no clip uses is no object
        local = {f: i for i, f in enumerate(used)}
        parents = [[local[f] for f in p] for p in parents]
        frames, first_frame = len(used), len(frame_nbytes)
        frame_nbytes += [size] * frames
        frame_seconds.append(decode)
        for clip, nbytes, made in zip(parents, clip_bytes, seconds, strict=True):
            clip_video.append(video)
            clip_nbytes.append(nbytes)
            clip_seconds.append(made)
            frame_ids += [first_frame + f for f in clip]
            clip_frames.append(len(frame_ids))
        graphs.append(ObjectGraph(
            names=(("video", video), *(("frame", video, f) for f in range(frames)),
                   *(("clip", video, c) for c in range(len(parents)))),
            parents=((), *((0,),) * frames, *(tuple(1 + f for f in p) for p in parents)),
            nbytes=(0, *[size] * frames, *clip_bytes),
            make_seconds=(0.0, *[decode] * frames, *seconds)))
    flat = FlatGraphs(np.array(clip_video, np.int64), np.array(clip_nbytes, np.int64),
                      np.array(clip_seconds), np.array(clip_frames, np.int64),
                      np.array(frame_ids, np.int64), np.array(frame_nbytes, np.int64),
                      np.array(frame_seconds))
    return flat, graphs


def as_names(flat: FlatGraphs, graphs: list[ObjectGraph], plan) -> list[frozenset]:
    """The flat result as `prune` names it: kept clips, and every frame where any is kept (a
    video's frames are kept only by a collapse, whose video then gets its cached set)."""
    cached: list[set] = [set() for _ in graphs]
    for clip in np.flatnonzero(plan.clips_kept):
        video = int(flat.clip_video[clip])
        cached[video].add(("clip", video, int(clip - np.searchsorted(flat.clip_video, video))))
    return [frozenset(c) for c in cached]


@pytest.mark.parametrize("seed", range(12))
def test_same_decisions_as_prune(seed):
    rng = np.random.default_rng(seed)
    flat, graphs = random_window(rng, int(rng.integers(1, 60)))
    total = int(flat.clip_nbytes.sum())
    for fraction in (1.0, 0.9, 0.6, 0.35, 0.1, 0.0):
        budget = int(total * fraction)
        expected = prune(graphs, budget)
        got = prune_flat(flat, budget, graphs.__getitem__)
        assert (got.total_nbytes, got.collapses, got.drops) == (
            expected.total_nbytes, expected.collapses, expected.drops), (seed, fraction)
        assert got.added_recompute_seconds == pytest.approx(expected.added_recompute_seconds,
                                                            rel=1e-12, abs=1e-15)
        kept = as_names(flat, graphs, got)
        for video, cached in enumerate(expected.cached):
            frames = {n for n in cached if n[0] == "frame"}
            assert bool(frames) == bool(got.frames_kept[video]), (seed, fraction, video)
            assert kept[video] == cached - frames, (seed, fraction, video)


@pytest.mark.parametrize("seed", range(6))
def test_the_merge_in_pieces_decides_the_same(seed, monkeypatch):
    """The merge reads its steps a piece at a time: pieces of a few steps give the same plan,
    its seconds to the bit."""
    rng = np.random.default_rng(seed)
    flat, graphs = random_window(rng, int(rng.integers(20, 60)), collapsible_share=0.3)
    total = int(flat.clip_nbytes.sum())
    for fraction in (0.7, 0.3, 0.0):
        budget = int(total * fraction)
        whole = prune_flat(flat, budget, graphs.__getitem__)
        for piece in (3, 1, 5):
            monkeypatch.setattr(flatprune, "_PIECE", piece)
            got = prune_flat(flat, budget, graphs.__getitem__)
            monkeypatch.undo()
            for name in type(whole).__slots__:
                assert np.array_equal(getattr(got, name), getattr(whole, name)), (
                    name, fraction, piece)


def test_the_merge_holds_few_bytes_a_step_beside_the_steps():
    """A 250,000-video window has ~1.2M drop steps: the merge's order, ranks and the steps it
    takes are held in ~19 bytes a step (the lexsort's), not copies of the steps' columns (31
    bytes a step: its peak set the daemon's). Room for 2% of the bytes, as the daemon's."""
    import tracemalloc

    rng = np.random.default_rng(5)
    count = 300_000
    walk = np.sort(rng.integers(0, 60_000, count)).astype(np.int32)
    steps = _Steps(walk, rng.choice([1e-9, 2e-9, 3e-9], count) * rng.integers(1, 4, count),
                   rng.integers(1, 10**6, count), np.arange(count, dtype=np.int32))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        took, saved, seconds = _taken(steps, total := int(steps.saved_nbytes.sum()), total // 50)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert 0 < took.sum() < count and saved >= total - total // 50 and seconds > 0
    assert peak / count <= 23, peak / count


def test_videos_whose_collapses_cannot_save_walk_without_their_graphs():
    rng = np.random.default_rng(99)
    flat, graphs = random_window(rng, 200, collapsible_share=0.0)
    asked = []
    got = prune_flat(flat, 0, lambda video: asked.append(video) or graphs[video])
    expected = prune(graphs, 0)
    assert not asked
    assert (got.total_nbytes, got.drops) == (expected.total_nbytes, expected.drops)


def test_recompute_estimate_matches_the_reference():
    """The estimate the daemon logs is within 2% of what remaking the uncached clips costs
    (recompute_seconds: independent of both walks' bookkeeping)."""
    import networkx as nx

    rng = np.random.default_rng(7)
    flat, graphs = random_window(rng, 40, collapsible_share=0.0)
    plan = prune_flat(flat, int(flat.clip_nbytes.sum() * 0.4), graphs.__getitem__)
    reference = 0.0
    for graph, cached in zip(graphs, as_names(flat, graphs, plan), strict=True):
        as_nx = nx.DiGraph()
        for node, parents in enumerate(graph.parents):
            as_nx.add_node(graph.names[node])
            for parent in parents:
                as_nx.add_edge(graph.names[parent], graph.names[node],
                               cost_seconds=graph.make_seconds[node] / len(parents))
        reference += recompute_seconds(as_nx, cached)
    assert reference > 0
    assert plan.added_recompute_seconds == pytest.approx(reference, rel=0.02)


def test_invalid_columns():
    with pytest.raises(ValueError, match="every clip"):
        FlatGraphs(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1),
                   np.array([0, 0]), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1))
    with pytest.raises(ValueError, match="budget_bytes"):
        flat, graphs = random_window(np.random.default_rng(0), 2)
        prune_flat(flat, -1, graphs.__getitem__)


def test_a_collapse_that_saves_a_little_is_taken():
    """Three 70 B clips of the same two 100 B frames: caching the frames saves 10 B, so the
    video walks as in `prune` (the bound lets no such video go without its graph)."""
    graph = ObjectGraph(names=("v", "f1", "f2", "c1", "c2", "c3"),
                        parents=((), (0,), (0,), (1, 2), (1, 2), (1, 2)),
                        nbytes=(0, 100, 100, 70, 70, 70),
                        make_seconds=(0.0, 0.01, 0.01, 0.001, 0.001, 0.001))
    flat = FlatGraphs(np.zeros(3, np.int64), np.full(3, 70), np.full(3, 0.001),
                      np.array([0, 2, 4, 6]), np.array([0, 1, 0, 1, 0, 1]),
                      np.full(2, 100), np.array([0.01]))
    plan = prune_flat(flat, 205, [graph].__getitem__)
    assert prune([graph], 205).cached == (frozenset({"f1", "f2"}),)
    assert (plan.total_nbytes, plan.collapses, plan.drops) == (200, 1, 0)
    assert not plan.clips_kept.any() and plan.frames_kept.all()


def test_an_empty_window_keeps_nothing():
    empty = np.zeros(0, np.int64)
    flat = FlatGraphs(empty, empty, np.zeros(0), np.zeros(1, np.int64), empty, empty,
                      np.zeros(0))
    plan = prune_flat(flat, 0, [].__getitem__)
    assert (plan.total_nbytes, plan.collapses, plan.drops, len(plan.clips_kept)) == (0, 0, 0, 0)


def chunked(flat: FlatGraphs, ends: list[int]) -> list[FlatGraphs]:
    """The graphs of videos [0, ends[0]), [ends[0], ends[1]), ... each numbered from 0."""
    parts = []
    for first, end in zip([0, *ends], [*ends, flat.videos], strict=True):
        low, high = np.searchsorted(flat.clip_video, [first, end]).tolist()
        ids = flat.frame_ids[flat.clip_frames[low]:flat.clip_frames[high]]
        frames, local = np.unique(ids, return_inverse=True)
        parts.append(FlatGraphs(flat.clip_video[low:high] - first, flat.clip_nbytes[low:high],
                                flat.clip_seconds[low:high],
                                flat.clip_frames[low:high + 1] - flat.clip_frames[low],
                                local.astype(np.int64), flat.frame_nbytes[frames],
                                flat.frame_seconds[first:end]))
    return parts


@pytest.mark.parametrize("seed", range(10))
def test_walks_a_chunk_at_a_time_take_the_steps_of_the_whole_window(seed):
    """Random flat windows cut at random videos (a chunk of one video, chunks with no clip
    to drop, slow videos in several chunks): the same plan, its seconds to the bit."""
    rng = np.random.default_rng(seed)
    flat, graphs = random_window(rng, int(rng.integers(2, 60)), collapsible_share=0.3)
    ends = sorted({int(e) for e in rng.integers(1, flat.videos, rng.integers(1, 8))})
    total = int(flat.clip_nbytes.sum())
    for fraction in (1.0, 0.7, 0.4, 0.1, 0.0):
        budget = int(total * fraction)
        whole = prune_flat(flat, budget, graphs.__getitem__)
        parts = prune_chunks(iter(chunked(flat, ends)), budget, graphs.__getitem__)
        for name in type(whole).__slots__:
            assert np.array_equal(getattr(parts, name), getattr(whole, name)), (name, fraction)
