"""Seed derivation (sandfs/plan/seeds.py, the mixing of sandfs/plan/draws.py): every draw a
pure function of its keys, the same in any process, and pinned: a change of these numbers
changes every plan and must come with a new PLAN_VERSION (cached objects of the old plans are
then never served)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from sandfs.plan import task
from sandfs.plan.draws import mixed_words, unit_columns
from sandfs.plan.seeds import below, clip_rng, derive_seed, key_words, purpose_word, rng_for
from sandfs.plan.task import PLAN_VERSION
from sandfs.plan.window import view_key
from tests.helpers.plans import make_plan

KEYS = (7, "op", (("crop", 0),), 0)
CLIP = (7, 4, "c0/v1", 3, "op", (("crop", 0),), 0)  # data key, epoch, name, sample, purpose


def test_a_generator_is_a_pure_function_of_its_keys():
    first, again = rng_for(*KEYS), rng_for(*KEYS)
    assert first is not again  # each caller owns its generator: draws never interleave
    assert first.integers(0, 1 << 30, 8).tolist() == again.integers(0, 1 << 30, 8).tolist()
    other = rng_for(7, "op", (("crop", 0),), 1)
    assert rng_for(*KEYS).integers(0, 1 << 30, 8).tolist() != other.integers(
        0, 1 << 30, 8).tolist()


def test_a_clips_generator_is_a_pure_function_of_its_keys():
    assert clip_rng(*CLIP).integers(0, 1 << 30, 8).tolist() == clip_rng(*CLIP).integers(
        0, 1 << 30, 8).tolist()
    for other in ((8, *CLIP[1:]), (7, 5, *CLIP[2:]), (7, 4, "c0/v2", *CLIP[3:]),
                  (*CLIP[:3], 4, *CLIP[4:]), (*CLIP[:-1], 1)):
        assert clip_rng(*other).integers(0, 1 << 30, 8).tolist() != clip_rng(*CLIP).integers(
            0, 1 << 30, 8).tolist()


def test_draws_are_the_same_in_another_process_with_another_hash_seed():
    code = ("from sandfs.plan.seeds import clip_rng, rng_for; "
            f"print(rng_for(*{KEYS!r}).integers(0, 1000, 4).tolist(), "
            f"clip_rng(*{CLIP!r}).integers(0, 1000, 4).tolist())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()
    here = (f"{rng_for(*KEYS).integers(0, 1000, 4).tolist()} "
            f"{clip_rng(*CLIP).integers(0, 1000, 4).tolist()}")
    assert out == here


def test_the_draws_are_pinned_for_this_plan_version():
    """If this fails, plans changed: bump PLAN_VERSION in sandfs/plan/task.py with the numbers."""
    assert PLAN_VERSION == 5
    assert rng_for(*KEYS).integers(0, 1000, 4).tolist() == [353, 603, 612, 351]
    assert clip_rng(*CLIP).integers(0, 1000, 4).tolist() == [397, 443, 21, 970]
    video = key_words(7, "video", "c0/v1")[None, :2]
    words = mixed_words(video, purpose_word("branch", (("s", 0),)), 4, np.array([0, 3]))
    assert words.tolist() == [
        [11635672411981249725, 12066331789035287938, 1709759896354024723, 15636998408737059075],
        [9139636884351497647, 17342824567762233412, 17473612534566192288, 15337125735387787596]]
    assert derive_seed(7, "x") == 107457156404303280035958192516640340177


def test_another_plan_version_names_other_batches(tmp_path, monkeypatch):
    """A batch's object is named by its plan key, which holds the plan version: a cache
    written by version 4 (every draw of a clip hashed) serves none of version 5's views."""
    now = view_key(make_plan(tmp_path), 0, 0)
    monkeypatch.setattr(task, "PLAN_VERSION", PLAN_VERSION - 1)
    before = view_key(make_plan(tmp_path), 0, 0)
    assert before.plan_key != now.plan_key and before.parts != now.parts


def test_mixed_draws_are_uniform_and_independent():
    """Of one video over epochs and samples, and of many videos: each word uniform (its 53
    high bits as a draw in [0, 1)), the four words and neighbouring counters uncorrelated."""
    one = key_words("v", "video", "c0/v1")[None, :2]
    over_counters = np.concatenate([mixed_words(np.repeat(one, 20, axis=0), 11, e,
                                                np.arange(20)) for e in range(1000)])
    keys = np.array([key_words("v", "video", f"c0/v{i}")[:2] for i in range(20_000)])
    over_videos = mixed_words(keys, 11, 3, np.zeros(20_000, np.int64))
    for words in (over_counters, over_videos):
        draws = unit_columns(words, 4)
        assert draws.min() >= 0 and draws.max() < 1
        for column in draws.T:
            assert stats.kstest(column, "uniform").pvalue > 0.001
        assert np.abs(np.corrcoef(draws.T) - np.eye(4)).max() < 0.03
        assert abs(np.corrcoef(draws[:-1, 0], draws[1:, 0])[0, 1]) < 0.03
    assert len({tuple(w) for w in over_counters.tolist()}) == 20_000  # no two alike


@pytest.mark.parametrize("count", [1, 2, 7, 224])
def test_below_stays_in_range_and_covers_it(count):
    assert below(count, 0.0) == 0
    assert below(count, np.nextafter(1.0, 0.0)) == count - 1
    units = unit_columns(mixed_words(key_words("b", count)[None, :2].repeat(50 * count, 0), 3,
                                     0, np.arange(50 * count)), 1)[:, 0]
    assert {below(count, u) for u in units.tolist()} == set(range(count))
