"""The chaos run in the stress tier (~2 minutes): tasks registered and removed through every
path, readers and lease holders killed, cache files corrupted, the cache disk filled and fault
points fired, beside a healthy task read continuously. Longer on demand:
`scripts/reliability.py --chaos MINUTES [--seed S]`."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.chaos import run_chaos
from tests.helpers.harness import require_fuse
from tests.helpers.reliability import record


@pytest.mark.stress
def test_chaos_run_keeps_the_healthy_task_exact(tmp_path):
    require_fuse()
    seed = int(os.environ.get("SANDFS_CHAOS_SEED", "1"))
    report = run_chaos(minutes=2.0, seed=seed, workdir=tmp_path)
    found = report.to_json()
    print(json.dumps(found))
    record("chaos", daemon_deaths=report.daemon_deaths, wrong_bytes=report.wrong_bytes,
           healthy_errors=len(report.healthy_errors), hangs=report.hangs,
           operations=sum(report.operations.values()))
    assert report.healthy_views_read > 0
    assert sum(report.operations.values()) > 20
    assert report.ok(), found
