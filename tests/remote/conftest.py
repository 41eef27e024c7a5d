"""Real stores on loopback, started and always stopped by the tests: Python's http.server (also
with injected faults, faulty_http.py) and moto's S3 server."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
# relative path -> size; hidden and non-video files are listed by the store but not fetched
TREE = {
    "archery/a1.mp4": 3000,
    "archery/a2.MP4": 5000,
    "bowling/deep/b1.mkv": 7000,
    "bowling/b 2.webm": 1200,
    "notes.txt": 100,
    ".hidden.mp4": 100,
    ".trash/x.mp4": 100,
}
VIDEOS = sorted(p for p in TREE if p.endswith((".mp4", ".MP4", ".mkv", ".webm"))
                and not any(part.startswith(".") for part in p.split("/")))
EXTENSIONS = (".mp4", ".mkv", ".webm")


def write_tree(root: Path, tree: dict[str, int] = TREE, seed: int = 0) -> Path:
    for rel, size in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size) if seed is None else _bytes(rel, size, seed))
    return root


def _bytes(rel: str, size: int, seed: int) -> bytes:
    import random

    return random.Random(f"{seed}:{rel}").randbytes(size)


@dataclass
class HttpStore:
    url: str
    process: subprocess.Popen

    def kill(self) -> None:
        stop(self.process)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    if process.stdout:
        process.stdout.close()


@contextlib.contextmanager
def http_store(directory: Path, *faults: str, port: int | None = None) -> Iterator[HttpStore]:
    """`python -m http.server` on loopback (`port`, or a free one), or faulty_http.py with
    `faults`."""
    port = port or free_port()
    if faults:
        command = [sys.executable, str(HERE / "faulty_http.py"), "--dir", str(directory),
                   "--port", str(port), *faults]
    else:
        command = [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
                   "--directory", str(directory), str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        line = process.stdout.readline()
        port = re.search(r"port (\d+)", line) if not faults else re.match(r"(\d+)", line)
        assert port, f"the HTTP server did not start: {line!r}"
        yield HttpStore(f"http://127.0.0.1:{port.group(1)}/", process)
    finally:
        stop(process)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@dataclass
class S3Store:
    endpoint: str
    bucket: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/data"

    @property
    def options(self) -> dict:
        return {"endpoint_url": self.endpoint, "key": "testing", "secret": "testing"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def put(self, key: str, body: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=key, Body=body)


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
        store.put(f"data/{rel}", _bytes(rel, size, 0))
    store.put("data2/decoy.mp4", b"decoy")
    return store
