"""Seed derivation: every random choice is a pure function of (seed, what it is for, ids).

Keys are hashed with SHA-256 (not Python's salted `hash`) so plans are identical across runs,
processes and machines. A clip's draws are mixed from one digest of its video
(`draws.mixed_words`), not hashed one by one.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.random.bit_generator import ISeedSequence

from sandfs.plan.draws import mixed_words


def _digest(keys: tuple) -> bytes:
    return hashlib.sha256(repr(keys).encode()).digest()


def derive_seed(*keys: object) -> int:
    """A 128-bit integer seed from any sequence of ints/strings (their repr is hashed)."""
    return int.from_bytes(_digest(keys)[:16], "little")



def below(count: int, unit: float) -> int:
    """An integer in [0, count) from a uniform draw in [0, 1)."""
    return min(count - 1, int(unit * count))


def key_words(*keys: object) -> np.ndarray:
    """The digest of these keys as four 64-bit words (`draws.digest_words` of one)."""
    return np.frombuffer(_digest(keys), dtype="<u8").astype(np.uint64)


def purpose_word(*keys: object) -> int:
    """A word naming what a clip's draws are for (a random branch step, an op, the pool's
    clip, a shared crop): `draws.mixed_words` mixes it in."""
    return int(key_words(*keys)[0])


def clip_rng(data_key: int, epoch: int, name: str, sample: int,
             *purpose: object) -> np.random.Generator:
    """The generator of one of a clip's draws (an op's, where its first output is not
    enough): PCG64 with the clip's mixed words (`draws.mixed_words` of its video's key,
    `video_keys`) as its state and increment."""
    keys = key_words(data_key, "video", name)[None, :2]
    words = mixed_words(keys, purpose_word(*purpose), epoch, np.array([sample]))
    return np.random.Generator(np.random.PCG64(_DigestWords(words.astype("<u8").tobytes())))


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
