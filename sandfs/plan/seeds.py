"""Seed derivation: every random choice is a pure function of (seed, what it is for, ids).

Keys are hashed with SHA-256 (not Python's salted `hash`) so plans are identical across runs,
processes and machines.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
from numpy.random.bit_generator import ISeedSequence


def _digest(keys: tuple) -> bytes:
    return hashlib.sha256(repr(keys).encode()).digest()


def derive_seed(*keys: object) -> int:
    """A 128-bit integer seed from any sequence of ints/strings (their repr is hashed)."""
    return int.from_bytes(_digest(keys)[:16], "little")


_UNIT = 2.0 ** -53


def unit_draws(*keys: object) -> tuple[float, float, float, float]:
    """Four independent uniform draws in [0, 1) for these keys, straight from their digest
    (53 bits each): the planner's own draws, a clip's start above all, need no generator."""
    return tuple((word >> 11) * _UNIT for word in struct.unpack("<4Q", _digest(keys)))


def below(count: int, unit: float) -> int:
    """An integer in [0, count) from a uniform draw in [0, 1)."""
    return min(count - 1, int(unit * count))


def rng_for(*keys: object) -> np.random.Generator:
    """A generator of its own for these keys. PCG64 takes the digest's 256 bits as its state
    and increment: a SHA-256 is already uniform, so numpy's SeedSequence would only mix it
    again, and that took 5 of a generator's 6.5 us (planning makes a few per clip)."""
    return np.random.Generator(np.random.PCG64(_DigestWords(_digest(keys))))


class _DigestWords(ISeedSequence):
    """A seed sequence that hands out the digest's own words."""

    __slots__ = ("digest",)

    def __init__(self, digest: bytes) -> None:
        self.digest = digest

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        words = np.frombuffer(self.digest, dtype=dtype)
        if n_words > len(words):
            raise ValueError(f"a digest holds {len(words)} words of {np.dtype(dtype)}, "
                             f"{n_words} asked")
        return words[:n_words]


def fingerprint(value: object) -> object:
    """A canonical, repr-stable form of a config value: dataclass fields that take part in
    equality only (line numbers and source paths are left out)."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            tuple(
                (f.name, fingerprint(getattr(value, f.name)))
                for f in dataclasses.fields(value)
                if f.compare
            ),
        )
    if isinstance(value, (tuple, list)):
        return tuple(fingerprint(v) for v in value)
    if isinstance(value, (frozenset, set)):
        return tuple(sorted(repr(fingerprint(v)) for v in value))
    return value
