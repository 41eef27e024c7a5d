"""Seed derivation: every random choice is a pure function of (seed, what it is for, ids).

Keys are hashed with SHA-256 (not Python's salted `hash`) so plans are identical across runs,
processes and machines.
"""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(*keys: object) -> int:
    """A 128-bit integer seed from any sequence of ints/strings (their repr is hashed)."""
    digest = hashlib.sha256(repr(keys).encode()).digest()
    return int.from_bytes(digest[:16], "little")


def rng_for(*keys: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(*keys))


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
