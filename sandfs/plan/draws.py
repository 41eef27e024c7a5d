"""A batch's or an epoch's random draws for many clips at once, as arrays, equal to the draws
of each clip alone (`seeds.py`): a video's SHA-256 digest, read in numpy, mixed with what
each draw is for, its epoch and sample (`mixed_words`), and numpy's PCG64 stepped in numpy
over all the clips (its 128-bit state as two 64-bit words). Creating a generator for every
clip and random op cost about 2.7 us each.

`FirstOutput` stands in for a clip's generator (`seeds.clip_rng`) where the first 64-bit
output of that generator is enough (a crop's two origins, a coin): it draws exactly as
`np.random.Generator` does and raises `NeedGenerator` for anything else, when the planner makes
the real generator instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)
# numpy's PCG64 multiplier, split in 64-bit words
_MULT_HI = np.uint64(2549297995355413924)
_MULT_LO = np.uint64(4865540595714422341)
_UNIT = 2.0 ** -53
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment and output multipliers
_FMIX1, _FMIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def digest_words(keys: Iterable[str]) -> np.ndarray:
    """The SHA-256 digests of these key reprs (`seeds._digest`'s text), as rows of four
    little-endian 64-bit words."""
    sha256 = hashlib.sha256
    joined = b"".join([sha256(k.encode()).digest() for k in keys])
    return np.frombuffer(joined, dtype="<u8").reshape(-1, 4).astype(np.uint64)


def _fmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function: a bijection of 64-bit words that spreads every bit."""
    x = (x ^ (x >> np.uint64(30))) * _FMIX1
    x = (x ^ (x >> np.uint64(27))) * _FMIX2
    return x ^ (x >> np.uint64(31))


def mixed_words(keys: np.ndarray, purpose: int, epoch: int, samples: np.ndarray,
                count: int = 4) -> np.ndarray:
    """The words of one draw for each clip (rows of `count`): its video's key (`keys`, rows
    of two words, from one SHA-256 a video) mixed with what the draw is for (`purpose`, a
    word), the epoch and the clip's sample, by SplitMix64's output function: a counter-based
    generator, vectorised, in place of a SHA-256 a clip and a draw."""
    with np.errstate(over="ignore"):
        counter = _fmix(np.uint64(purpose) ^ _fmix(
            np.uint64(epoch) * _GOLDEN + samples.astype(np.uint64)))
        return np.stack([_fmix(keys[:, j % 2] ^ (counter + np.uint64(j + 1) * _GOLDEN))
                         for j in range(count)], axis=1)


def unit_columns(words: np.ndarray, count: int = 2) -> np.ndarray:
    """The first `count` uniform draws in [0, 1) of each row: the top 53 bits of each word."""
    return (words[:, :count] >> np.uint64(11)).astype(np.float64) * _UNIT


def below(count: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """`seeds.below` for arrays."""
    return np.minimum(count - 1, (unit * count).astype(np.int64))


def _mul_wide(a: np.ndarray, b: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """a * b as 128 bits (high, low words), from 32-bit halves."""
    a0, a1 = a & _MASK32, a >> _U32
    b0, b1 = b & _MASK32, b >> _U32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    middle = (p00 >> _U32) + (p01 & _MASK32) + (p10 & _MASK32)
    return p11 + (p01 >> _U32) + (p10 >> _U32) + (middle >> _U32), a * b


def _step(hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """state * MULT + inc, modulo 2**128."""
    top, low = _mul_wide(lo, _MULT_LO)
    top = top + hi * _MULT_LO + lo * _MULT_HI
    new_lo = low + inc_lo
    carry = (new_lo < low).astype(np.uint64)
    return top + inc_hi + carry, new_lo


def pcg64_first(words: np.ndarray) -> np.ndarray:
    """The first 64-bit output of `PCG64` seeded by each row (`seeds._DigestWords`: the state
    from words 0-1, the increment from words 2-3), numpy's XSL-RR output."""
    with np.errstate(over="ignore"):
        seed_hi, seed_lo, inc_hi, inc_lo = (words[:, i] for i in range(4))
        inc_hi = (inc_hi << np.uint64(1)) | (inc_lo >> np.uint64(63))
        inc_lo = (inc_lo << np.uint64(1)) | np.uint64(1)
        lo = inc_lo + seed_lo  # srandom: one step from 0 is the increment, plus the seed
        hi = inc_hi + seed_hi + (lo < seed_lo).astype(np.uint64)
        hi, lo = _step(hi, lo, inc_hi, inc_lo)
        hi, lo = _step(hi, lo, inc_hi, inc_lo)  # the step of the first output
        mixed, rot = hi ^ lo, hi >> np.uint64(58)
        return (mixed >> rot) | (mixed << ((np.uint64(64) - rot) & np.uint64(63)))


def first_integers(outputs: np.ndarray, spans: Sequence[int]
                   ) -> tuple[list[np.ndarray], np.ndarray] | None:
    """`FirstOutput(output).integers(0, span)` for each span in turn, for every output: the
    values drawn, and where `FirstOutput` would raise NeedGenerator (a draw numpy rejects);
    None where it would for every output (a span it cannot draw, a third 32-bit half)."""
    halves = (outputs & _MASK32, outputs >> _U32)
    need = np.zeros(len(outputs), bool)
    values, taken = [], 0
    for span in spans:
        if span == 1:  # numpy draws nothing
            values.append(np.zeros(len(outputs), np.int64))
            continue
        if not 1 < span < 0xFFFFFFFF or taken == len(halves):
            return None
        scaled = halves[taken] * np.uint64(span)
        taken += 1
        need |= (scaled & _MASK32) < np.uint64((0x100000000 - span) % span)
        values.append((scaled >> _U32).astype(np.int64))
    return values, need


def first_units(outputs: np.ndarray) -> np.ndarray:
    """`FirstOutput(output).random()` for every output."""
    return (outputs >> np.uint64(11)).astype(np.float64) * _UNIT


class NeedGenerator(Exception):
    """A draw `FirstOutput` cannot make exactly: make the clip's generator."""


class FirstOutput:
    """A clip's generator known by its first 64-bit output: `integers(low, high)` (Lemire's
    bounded draw on 32-bit halves, low half first, as numpy's scalar `integers`) and `random()`,
    while that output lasts."""

    __slots__ = ("_half", "_output", "_taken")

    def __init__(self, output: int) -> None:
        self._output, self._taken, self._half = output, False, False

    def _next64(self) -> int:
        if self._taken:
            raise NeedGenerator
        self._taken = True
        return self._output

    def _next32(self) -> int:
        if self._half:  # numpy keeps the high half of an output for the next 32-bit draw
            self._half = False
            return self._output >> 32
        self._half = True
        return self._next64() & 0xFFFFFFFF

    def random(self, size=None, dtype=np.float64, out=None) -> float:
        if size is not None or dtype is not np.float64 or out is not None:
            raise NeedGenerator
        return (self._next64() >> 11) * _UNIT

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False) -> int:
        if (high is None or size is not None or dtype is not np.int64 or endpoint
                or not isinstance(low, int) or not isinstance(high, int)):
            raise NeedGenerator
        span = high - low  # values to choose from
        if span == 1:
            return low  # numpy draws nothing
        if not 1 < span < 0xFFFFFFFF:
            raise NeedGenerator
        scaled = self._next32() * span
        if scaled & 0xFFFFFFFF < (0x100000000 - span) % span:  # numpy would draw again
            raise NeedGenerator
        return low + (scaled >> 32)

    def __getattr__(self, name: str):
        raise NeedGenerator


def key_texts(head: tuple, middles: Iterable[str], tail: tuple = ()) -> list[str]:
    """`repr(head + middle + tail)` (`seeds._digest`'s text) for each middle, given as its parts'
    reprs joined by ", "; the head's and the tail's reprs made once."""
    assert len(head) > 1  # a 1-tuple's repr ends in ",)"
    opening = repr(head)[:-1] + ", "
    closing = "".join(", " + repr(part) for part in tail) + ")"
    return [opening + middle + closing for middle in middles]
