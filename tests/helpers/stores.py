"""Real stores on loopback for the remote-dataset tests: Python's http.server (also with
injected faults, faulty_http.py) and moto's S3 server, and the tree of files they serve."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.harness import free_port

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
        path.write_bytes(os.urandom(size) if seed is None else file_bytes(rel, size, seed))
    return root


def file_bytes(rel: str, size: int, seed: int) -> bytes:
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
