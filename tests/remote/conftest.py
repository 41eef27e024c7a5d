"""Fixtures: real stores on loopback, started and always stopped by the tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.stores import TREE, HttpStore, S3Store, file_bytes, http_store, write_tree


@pytest.fixture
def tree(tmp_path) -> Path:
    return write_tree(tmp_path / "served")


@pytest.fixture
def http(tree) -> Iterator[HttpStore]:
    with http_store(tree) as store:
        yield store


@pytest.fixture
def cache_dir(tmp_path) -> str:
    path = tmp_path / "cache"
    path.mkdir(mode=0o700)
    return str(path)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server, request) -> S3Store:
    """A fresh bucket per test, holding TREE under `data/` and a decoy sibling `data2/`."""
    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:60].strip("-")
    store = S3Store(s3_server, bucket)
    store.client().create_bucket(Bucket=bucket)
    for rel, size in TREE.items():
        store.put(f"data/{rel}", file_bytes(rel, size, 0))
    store.put("data2/decoy.mp4", b"decoy")
    return store
