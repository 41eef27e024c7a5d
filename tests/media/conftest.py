"""Session fixtures: the corpus is generated once, scanned once (with its log captured)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus import EXTENSIONS, CorpusFile, build_corpus, remove_corpus

from sandfs.media.scan import scan_dataset
from sandfs.media.types import DatasetScan, MediaLimits


@dataclass(frozen=True)
class Corpus:
    root: Path
    files: dict[str, CorpusFile]  # rel_path -> file, only those this build could write


@dataclass(frozen=True)
class CorpusScan:
    scan: DatasetScan
    index_path: Path
    elapsed_seconds: float
    records: list[logging.LogRecord]


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
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
