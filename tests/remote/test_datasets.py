"""Several remote datasets of one mount: one copy each, sharing the storage budget."""

from __future__ import annotations

import os

import pytest

from sandfs.remote import RemoteError, RemoteSpec, prepare_remote_datasets
from tests.helpers.stores import EXTENSIONS, TREE, VIDEOS, http_store, write_tree

pytest.importorskip("fsspec")  # the remote extra
pytest.importorskip("aiohttp")


@pytest.fixture
def two_stores(tree, tmp_path):
    other = write_tree(tmp_path / "other", {"c/v.mp4": 500, "d/w.mp4": 700})
    with http_store(tree) as first, http_store(other) as second:
        yield first, second


def specs(first, second):
    return [RemoteSpec.of(first.url, None, None, EXTENSIONS),
            RemoteSpec.of(second.url, {}, None, EXTENSIONS),
            RemoteSpec.of(first.url.rstrip("/"), None, None, EXTENSIONS)]  # the first again


def test_each_dataset_is_fetched_once_and_the_copies_add_up(two_stores, cache_dir):
    first, second = two_stores
    total = sum(TREE[rel] for rel in VIDEOS) + 1200
    copies = prepare_remote_datasets(specs(first, second), cache_dir=cache_dir,
                                     budget_bytes=total)
    assert len(copies.copies) == 2
    assert copies.bytes_on_disk == total
    assert copies.stats.bytes_fetched == total
    assert copies.stats.files_fetched == len(VIDEOS) + 2
    assert sorted(os.listdir(copies.root(specs(first, second)[1]))) == ["c", "d"]
    again = prepare_remote_datasets(specs(first, second), cache_dir=cache_dir,
                                    budget_bytes=total)
    assert again.stats.bytes_fetched == 0
    assert again.stats.as_status()["files_reused"] == len(VIDEOS) + 2


def test_together_they_must_fit_the_budget_and_never_evict_each_other(two_stores, cache_dir):
    first, second = two_stores
    total = sum(TREE[rel] for rel in VIDEOS) + 1200
    prepare_remote_datasets(specs(first, second)[:1], cache_dir=cache_dir, budget_bytes=None)
    with pytest.raises(RemoteError, match="more than the storage budget"):
        prepare_remote_datasets(specs(first, second), cache_dir=cache_dir,
                                budget_bytes=total - 1)
    kept = prepare_remote_datasets(specs(first, second)[:1], cache_dir=cache_dir,
                                   budget_bytes=total)
    assert kept.stats.bytes_fetched == 0  # the first copy was not deleted for the second
