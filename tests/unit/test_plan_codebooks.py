"""A plain path's codebooks (`sandfs/plan/staticpath.py`): bounded together over many epochs
and frame sizes, right across a replacement, under concurrent planning threads, and beside
clips whose ops are drawn one at a time."""

from __future__ import annotations

import dataclasses
import sys
import threading

import numpy as np
import pytest

from sandfs.plan import columns, staticpath
from sandfs.plan.staticpath import Codebook, Shelf
from sandfs.plan.window import plan_window
from tests.helpers.harness import task_config
from tests.helpers.plans import FAKE_DATASET, fake_videos
from tests.unit.test_plan_columns import (
    _assert_batches_as_walked,
    _plans,
    _random_config,
    _single,
    _values,
    _videos,
    _walked,
)

BOUND = 128  # INTERNED_MAX in these tests


def _many_sizes(count: int) -> list:
    """Videos of 30 frame sizes: 30 templates of one path."""
    return [dataclasses.replace(v, width=64 + 4 * (i % 30), height=48 + 2 * (i % 30))
            for i, v in enumerate(fake_videos(count))]


def _crop_config(epochs: int) -> dict:
    return task_config(FAKE_DATASET, seed=3, epochs=epochs, augmentation=[_single(
        "aug", "frame", "out", [{"random_crop": {"size": [16, 16]}},
                                {"flip": {"direction": "horizontal", "p": 0.5}}])],
        sampling={"videos_per_batch": 4, "frames_per_video": 2, "frame_stride": 1,
                  "samples_per_video": 2})


def test_a_paths_books_stay_bounded_over_epochs_and_frame_sizes(monkeypatch):
    """One book a frame size, each bounded alone, held sizes x INTERNED_MAX tuples; together
    they hold at most INTERNED_MAX and one epoch's clips (the call that crossed it)."""
    monkeypatch.setattr(staticpath, "INTERNED_MAX", BOUND)
    config, videos = _crop_config(8), _many_sizes(120)
    plan, = _plans(config, videos)
    walked, = _walked(_plans(config, videos))
    fast, per_epoch = plan.static_paths[0], 120 * 2
    shelves = set()
    for epoch in range(plan.epochs):
        _assert_batches_as_walked_in(plan, walked, epoch)
        plan.draws.release(epoch)
        books = fast._shelf.books.values()
        shelves.add(id(fast._shelf))
        assert sum(map(len, books)) == fast._shelf.size <= BOUND + per_epoch
    assert len(shelves) > 2  # replaced, and right after


def _assert_batches_as_walked_in(fast, slow, epoch: int) -> None:
    iterations = list(range(fast.iterations_per_epoch))
    for iteration, view in zip(iterations, fast.resolve_batches(epoch, iterations),
                               strict=True):
        assert _values(view) == _values(slow.view_plan(epoch, iteration)), (epoch, iteration)


def test_a_table_keeps_its_ops_when_its_book_is_replaced(monkeypatch):
    monkeypatch.setattr(staticpath, "INTERNED_MAX", BOUND)
    config, videos = _crop_config(6), _many_sizes(60)
    plan, = _plans(config, videos)
    first = plan.resolve_batches(0, range(plan.iterations_per_epoch))
    held = [_values(view) for view in first]
    shelf = plan.static_paths[0]._shelf
    for epoch in range(1, plan.epochs):
        plan.resolve_batches(epoch, range(plan.iterations_per_epoch))
    assert plan.static_paths[0]._shelf is not shelf
    assert [_values(view) for view in first] == held


def test_threads_planning_one_path_across_replacements_resolve_the_walks_clips(monkeypatch):
    monkeypatch.setattr(staticpath, "INTERNED_MAX", 32)
    switch = sys.getswitchinterval()
    config, videos = _crop_config(4), _many_sizes(80)
    plan, = _plans(config, videos)
    walked, = _walked(_plans(config, videos))
    iterations = list(range(plan.iterations_per_epoch))
    found: dict[tuple[int, int], list] = {}

    def resolve(thread: int) -> None:
        for epoch in range(plan.epochs):
            found[thread, epoch] = [_values(v) for v in plan.resolve_batches(epoch, iterations)]

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=resolve, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    for (_, epoch), views in found.items():
        assert views == [_values(walked.view_plan(epoch, i)) for i in iterations]


@pytest.mark.parametrize("seed", [0, 5, 7])
def test_ops_drawn_alone_beside_coded_ones_are_the_walks(seed, monkeypatch):
    """Every third clip's ops drawn one at a time (as a draw numpy would reject), the others
    from the codebook: one list holding both."""
    drawn_codes = columns.drawn_codes

    def forced(random, outputs):
        found = drawn_codes(random, outputs)
        if found is None:
            return None
        code, need, count = found
        need = need.copy()
        need[::3] = True
        return code, need, count

    monkeypatch.setattr(columns, "drawn_codes", forced)
    config, videos = _random_config(seed), _videos(23, seed)
    fast, slow = _plans(config, videos), _walked(_plans(config, videos))
    for plan, walked in zip(fast, slow, strict=True):
        _assert_batches_as_walked(plan, walked)


def test_a_books_places_stay_sorted_by_code_as_codes_come():
    book, made = Codebook(Shelf()), []
    rng = np.random.default_rng(4)
    for _ in range(20):
        codes = rng.integers(0, 500, 40)
        ops, places = book.places_of(codes, lambda i, c=codes: made.append(int(c[i]))
                                     or (int(c[i]),))
        assert [ops[p] for p in places.tolist()] == [(c,) for c in codes.tolist()]
    assert len(made) == len(set(made)) == len(book)
    assert np.all(np.diff(book._codes) > 0)


def test_tasks_on_one_listing_share_a_windows_draws_until_the_last_lets_go():
    """Names, sizes and pool anchors are the listing's: one object a window for every task
    placing it, gone once every task has planned the window."""
    config, videos = _random_config(3), _videos(23, 3)
    plans = _plans(config, videos, tasks=2)
    first, second = (plan.draws._window(0) for plan in plans)
    assert first is second and plans[0].listing is plans[1].listing
    del first, second
    plan_window(plans, 0)
    assert not plans[0].draws._windows and not plans[0].listing._windows


def test_a_window_used_last_is_kept_before_an_older_one():
    plan, = _plans(_random_config(3), _videos(23, 3))
    draws = plan.draws
    kept = draws._window(0)
    draws._window(1)
    assert draws._window(0) is kept  # used again: the newest
    draws._window(2)  # evicts window 1, not 0
    assert list(draws._windows) == [0, 2] and draws._window(0) is kept
