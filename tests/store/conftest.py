"""Store fixtures: stores on real temp dirs, each checked with `store.check()` at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sandfs import faults
from sandfs.cache import ObjectStore


@pytest.fixture
def make_store(tmp_path) -> Iterator[Callable[..., ObjectStore]]:
    """Opens stores (default: tmp_path/cache, 1 MiB); each still open at teardown must pass
    check() and is closed."""
    stores: list[ObjectStore] = []

    def make(root: str | None = None, budget_bytes: int = 1 << 20, **kwargs) -> ObjectStore:
        store = ObjectStore(root or str(tmp_path / "cache"), budget_bytes, **kwargs)
        store.open()
        stores.append(store)
        return store

    yield make
    for store in stores:
        if store._lock_fd is not None:
            assert store.check() == []
            store.close()


@pytest.fixture
def fault(monkeypatch) -> Callable[[str], None]:
    """Arms a fault point in this process, as SANDFS_FAULT=<spec> would at start-up."""

    def arm(spec: str) -> None:
        parsed = faults._parse(spec)
        assert parsed is not None, spec
        monkeypatch.setattr(faults, "_SPEC", parsed)
        monkeypatch.setattr(faults, "_hits", {})

    return arm
