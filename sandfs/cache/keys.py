"""Object keys: a kind and a 32-byte digest of the object's canonical description."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sandfs.cache.formats import KINDS

DIGEST_BYTES = 32
KIND_CODES = {kind: code for code, kind in enumerate(KINDS, start=1)}
KINDS_BY_CODE = {code: kind for kind, code in KIND_CODES.items()}


@dataclass(frozen=True, slots=True)
class ObjectKey:
    kind: str
    digest: bytes

    def __post_init__(self) -> None:
        if self.kind not in KIND_CODES:
            raise ValueError(f"unknown object kind {self.kind!r}; known: {', '.join(KINDS)}")
        if not isinstance(self.digest, bytes) or len(self.digest) != DIGEST_BYTES:
            raise ValueError(f"digest must be {DIGEST_BYTES} bytes, got {self.digest!r:.80}")

    @classmethod
    def of(cls, kind: str, *parts: object) -> ObjectKey:
        """The key of an object described by `parts`: sha256 of their repr, so the parts must be
        values with a stable repr (str, int, float, bytes, tuples of them), never objects."""
        return cls(kind, hashlib.sha256(repr((kind, *parts)).encode()).digest())

    @property
    def hex(self) -> str:
        return self.digest.hex()

    def __str__(self) -> str:
        return f"{self.kind}:{self.hex[:16]}"
