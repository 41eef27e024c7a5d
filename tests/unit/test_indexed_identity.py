"""A task's dataset identity taken from the scan index (plan/mount.py `indexed_identity`): the
one a cold mount computes where the task places every listed file; computed where its owner
reads only some; and the stored digest's definition is versioned (IDENTITY_VERSION)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from sandfs.access import stamped
from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.synth import make_dataset
from sandfs.media.types import IDENTITY_VERSION, listing_digest
from sandfs.plan.identity import dataset_identity
from sandfs.plan.mount import dataset_key, indexed_identity, plan_tasks
from tests.helpers.harness import task_config, write_config

NOBODY = 65534


def _warm_plan(tmp_path: Path, root: Path, access=None):
    """A cold scan's identity, and the plan of one task over a warm scan of `root`."""
    index = tmp_path / "index.json"
    cold = scan_dataset(root, ["mp4"], index_path=index)
    found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), workers=1,
                                    index_path=index)
    thread.join()
    cfg = load_task_config(write_config(tmp_path / "t.yaml", task_config(root)))
    if access is not None:
        cfg = replace(cfg, access=access(cfg.access))
    [plan] = plan_tasks([cfg], {dataset_key(cfg): found}, k_epochs=1)
    return cfg, found, dataset_identity(cfg.dataset.tag, cold.videos), plan


def test_a_task_placing_every_listed_file_plans_with_the_indexed_identity(tmp_path):
    root = tmp_path / "videos"
    make_dataset(root, classes=["a", "b"], videos_per_class=3, num_frames=(24, 40),
                 size=(64, 48), seed=3, gop=12)
    cfg, found, computed, plan = _warm_plan(tmp_path, root)
    assert found.digest is not None
    assert indexed_identity(cfg, found, found.listed) == computed == plan.identity
    # a subset (an owner's) is never given the index's identity
    assert indexed_identity(cfg, found, tuple(found.listed[:3])) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's owner filter")
def test_a_task_whose_owner_reads_some_files_computes_its_identity(tmp_path):
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="indexed-identity-"))  # nobody reaches it
    try:
        base.chmod(0o755)
        root = base / "videos"
        make_dataset(root, classes=["a", "b"], videos_per_class=3, num_frames=(24, 40),
                     size=(64, 48), seed=3, gop=12)
        (root / "a" / "a_000.mp4").chmod(0o600)
        _, found, indexed, plan = _warm_plan(
            tmp_path, root, lambda access: stamped(access, NOBODY, NOBODY))
        readable = [v for v in found.listed if v.rel_path != "a/a_000.mp4"]
        assert found.digest == indexed.digest
        assert plan.identity == dataset_identity(plan.cfg.dataset.tag, readable)
        assert plan.identity.digest != indexed.digest
    finally:
        shutil.rmtree(base)


def test_the_listing_digest_is_of_its_identity_version():
    """A digest recorded under IDENTITY_VERSION 1: a change to listing_digest's definition
    must bump IDENTITY_VERSION (scan indexes' stored digests are then not reused) and
    record the new digest here."""
    files = [("b/v.mp4", 2174), ("a/\udcff.mp4", 1), ("a/x\ny.mp4", 0)]
    assert (IDENTITY_VERSION, listing_digest(files)) == (
        1, "b164795dde908f8e8d773cf821e0459adb641f246458422a3bc968cd967a09a2")
