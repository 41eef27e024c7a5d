"""The in-process FUSE tier: the operations over a service, no kernel mount. The dataset is
scanned once and the reference views are computed once per session; each test gets its own
plan, service and (with `fs`) running scheduler."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache, partial
from pathlib import Path

import pyfuse3
import pytest

from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.media.types import DatasetScan
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import Client, make_service, readdir_reply, serving
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view


@pytest.fixture(scope="session")
def t0_config(dataset_dir, tmp_path_factory) -> Path:
    """Task t0: the default test config over the session's dataset."""
    return write_config(tmp_path_factory.mktemp("t0") / "t0.yaml", task_config(dataset_dir))


@pytest.fixture(scope="session")
def scans(t0_config) -> dict[tuple, DatasetScan]:
    """The dataset's scan, keyed as the daemon keys it: (root, extensions)."""
    dataset = load_task_config(t0_config).dataset
    key = (dataset.video_dataset_path, dataset.extensions)
    return {key: scan_dataset(*key)}


@pytest.fixture(scope="session")
def plan(t0_config, scans) -> TaskPlan:
    """A plan of t0 of its own (never the served one, which the scheduler works on)."""
    return build_plan(t0_config, *scans.values())


@pytest.fixture(scope="session")
def expected_view(plan) -> Callable[[int, int], bytes]:
    """(epoch, iteration) -> the reference oracle's bytes of t0's view, each computed once."""
    return cache(partial(reference_view, plan))


@pytest.fixture(autouse=True)
def listings_without_a_kernel(monkeypatch) -> None:
    monkeypatch.setattr(pyfuse3, "readdir_reply", readdir_reply)


@asynccontextmanager
async def served(config: Path, scans, cache_dir: Path, *, scheduler: bool
                 ) -> AsyncIterator[Client]:
    service = make_service([build_plan(config, *scans.values())],
                           task_texts={"t0": load_task_config(config).source_text},
                           scans=dict(scans),
                           cache_dir=cache_dir, config_dir=str(config.parent))
    async with serving(service, scheduler=scheduler) as ops:
        yield Client(ops)


@pytest.fixture
async def fs(t0_config, scans, tmp_path) -> AsyncIterator[Client]:
    """Task t0 served in-process; tasks can join through .sand/tasks."""
    async with served(t0_config, scans, tmp_path / "cache", scheduler=True) as client:
        yield client


@pytest.fixture
async def idle_fs(t0_config, scans, tmp_path) -> AsyncIterator[Client]:
    """Like `fs`, but the scheduler never starts: nothing is prepared ahead of a read."""
    async with served(t0_config, scans, tmp_path / "cache", scheduler=False) as client:
        yield client
