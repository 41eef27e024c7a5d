"""Session fixtures: the corpus is generated once, scanned once (with its log captured); and a
dataset long enough to stop a scan midway."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandfs.media.scan import scan_dataset
from sandfs.media.types import MediaLimits
from tests.helpers.corpus import EXTENSIONS, Corpus, CorpusScan, build_corpus, remove_corpus


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    root = tmp_path_factory.mktemp("corpus") / "root"
    files = build_corpus(root)
    yield Corpus(root, {f.rel_path: f for f in files})
    remove_corpus(root)


@pytest.fixture(scope="session")
def corpus_scan(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> CorpusScan:
    index_path = tmp_path_factory.mktemp("index") / "scan-index.json"
    handler = _ListHandler()
    logger = logging.getLogger("sandfs.media.scan")
    logger.addHandler(handler)
    started = time.monotonic()
    try:
        scan = scan_dataset(
            corpus.root, EXTENSIONS, limits=MediaLimits(), workers=2, index_path=index_path
        )
    finally:
        logger.removeHandler(handler)
    return CorpusScan(scan, index_path, time.monotonic() - started, handler.records)


@pytest.fixture
def many_videos(tmp_path: Path, dataset_dir: Path) -> Path:
    """60 copies of one short video: a scan long enough to stop midway."""
    root = tmp_path / "many"
    root.mkdir()
    source = sorted(dataset_dir.rglob("*.mp4"))[0]
    for i in range(60):
        shutil.copy(source, root / f"v{i:03d}.mp4")
    return root
