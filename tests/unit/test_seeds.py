"""Seed derivation (sandfs/plan/seeds.py): every draw a pure function of its keys, the same in
any process, and pinned: a change of these numbers changes every plan and must come with a new
PLAN_VERSION (cached objects of the old plans are then never served)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from sandfs.plan.seeds import below, derive_seed, rng_for, unit_draws
from sandfs.plan.task import PLAN_VERSION

KEYS = (7, "op", (("crop", 0),), 0)


def test_a_generator_is_a_pure_function_of_its_keys():
    first, again = rng_for(*KEYS), rng_for(*KEYS)
    assert first is not again  # each caller owns its generator: draws never interleave
    assert first.integers(0, 1 << 30, 8).tolist() == again.integers(0, 1 << 30, 8).tolist()
    other = rng_for(7, "op", (("crop", 0),), 1)
    assert rng_for(*KEYS).integers(0, 1 << 30, 8).tolist() != other.integers(
        0, 1 << 30, 8).tolist()


def test_draws_are_the_same_in_another_process_with_another_hash_seed():
    code = ("from sandfs.plan.seeds import rng_for, unit_draws; "
            f"print(rng_for(*{KEYS!r}).integers(0, 1000, 4).tolist(), "
            "unit_draws(7, 'clip', 0, 'c0/v1', 3, 0))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()
    draws = rng_for(*KEYS).integers(0, 1000, 4).tolist()
    here = f"{draws} {unit_draws(7, 'clip', 0, 'c0/v1', 3, 0)}"
    assert out == here


def test_the_draws_are_pinned_for_this_plan_version():
    """If this fails, plans changed: bump PLAN_VERSION in sandfs/plan/task.py with the numbers."""
    assert PLAN_VERSION == 4
    assert rng_for(*KEYS).integers(0, 1000, 4).tolist() == [353, 603, 612, 351]
    assert unit_draws(7, "clip", 0, "c0/v1", 3, 0) == pytest.approx(
        (0.45182937428556835, 0.1658385083038445, 0.3929209460268258, 0.11670117724917006),
        abs=0)
    assert derive_seed(7, "x") == 107457156404303280035958192516640340177


def test_unit_draws_are_uniform_and_independent():
    draws = np.array([unit_draws("u", i) for i in range(20_000)])
    assert draws.min() >= 0 and draws.max() < 1
    assert np.allclose(draws.mean(axis=0), 0.5, atol=0.01)
    assert abs(np.corrcoef(draws.T)[0, 1]) < 0.03  # the four words are independent


@pytest.mark.parametrize("count", [1, 2, 7, 224])
def test_below_stays_in_range_and_covers_it(count):
    assert below(count, 0.0) == 0
    assert below(count, np.nextafter(1.0, 0.0)) == count - 1
    hits = {below(count, unit_draws("b", count, i)[0]) for i in range(50 * count)}
    assert hits == set(range(count))
