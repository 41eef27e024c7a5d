"""A cold mount serves before its scan ends (docs/contract.md#lazy-scan), through a real mount:
its first batch is read while status.json says most of the dataset is not probed yet, the rest
is probed behind the readers, and the views equal those of a mount whose scan index knew every
file already."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandfs.media.scan_index import read_index
from sandfs.media.synth import write_test_video
from sandfs.media.types import MediaLimits
from tests.helpers.harness import (
    Mounted,
    forgiving_teardown,
    require_fuse,
    start_daemon,
    status_of,
    strict_teardown,
    task_config,
    wait_mounted,
    wait_scanned,
    write_config,
)

VIDEOS = 3000  # hard links of 12 small videos: listed in a blink, probed in seconds
BAD = "c1/v0007.mkv"  # 7 % 3 == 1


@pytest.fixture(scope="module")
def linked_dataset(tmp_path_factory) -> Path:
    """Matroska: its packets are demuxed and counted (an MP4's sample tables are read 10x
    faster: 3,000 were probed before the first batch was read)."""
    base = tmp_path_factory.mktemp("linked")
    root, sources = base / "videos", []
    for i in range(12):
        sources.append(base / f"source{i}.mkv")
        write_test_video(sources[-1], num_frames=40, width=64, height=48, gop=12, seed=i)
    for i in range(VIDEOS):
        folder = root / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        os.link(sources[i % len(sources)], folder / f"v{i:04d}.mkv")
    (root / BAD).unlink()
    (root / BAD).write_bytes(b"not a video" * 100)  # found bad only when probed
    return root


def start_held(tmp_path: Path, root: Path) -> tuple[Path, Path, Path, Path, subprocess.Popen]:
    """A cold mount of `root` (config, mountpoint, log, cache, daemon) whose scan cannot outrun
    its first batch: 2 epochs a window of 3,000 videos (6,000 clips, planned from its first
    batches' videos), front workers probing only what planning waits for, and the background
    worker held 10 s at its start."""
    require_fuse()
    config = task_config(root, epochs=2)
    config["dataset"]["extensions"] = [".mkv"]
    config["engine"]["scan"] = {"ahead_videos": 0}
    config = write_config(tmp_path / "t.yaml", config)
    mountpoint, log, cache = tmp_path / "mnt", tmp_path / "cold.log", tmp_path / "cache"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [config], cache, log,
                           env={"SANDFS_FAULT": "background_scan:1:sleep"})
    return config, mountpoint, log, cache, process


def test_the_first_batch_is_served_while_most_of_the_dataset_is_not_probed(
        tmp_path, linked_dataset):
    config, mountpoint, log, cache, process = start_held(tmp_path, linked_dataset)
    try:
        wait_mounted(mountpoint, process, log)
        first = (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        scan = status_of(mountpoint)["scan"]
        dataset = scan["datasets"][0]
        assert scan["phase"] == "ready" and dataset["videos_total"] == VIDEOS
        assert dataset["videos_scanned"] < VIDEOS // 2, scan  # served long before the end
        iterations = status_of(mountpoint)["tasks"]["t0"]["iterations_per_epoch"]
        read = (1, 2, 3, iterations // 3)  # past the lead part: the window is planned in parts
        cold = [(mountpoint / "t0" / "0" / str(i) / "view").read_bytes() for i in read]
        bad = wait_scanned(mountpoint, process, log)["bad_videos"]
        assert [b["path"] for b in bad] == [BAD]
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)
    # the same dataset, every probe in the scan index (nothing else kept): the same bytes
    (tmp_path / "warm").mkdir()
    for index in cache.glob("scan-*.json"):
        shutil.copy(index, tmp_path / "warm")
    process = start_daemon(mountpoint, [config], tmp_path / "warm", tmp_path / "warm.log")
    try:
        wait_mounted(mountpoint, process, tmp_path / "warm.log")
        assert (mountpoint / "t0" / "0" / "0" / "view").read_bytes() == first
        assert [(mountpoint / "t0" / "0" / str(i) / "view").read_bytes()
                for i in read] == cold
        strict_teardown(Mounted(mountpoint, process, tmp_path / "warm.log", tmp_path / "warm"))
    finally:
        forgiving_teardown(mountpoint, process)


def test_a_mount_stopped_before_its_scan_ended_leaves_the_next_one_warm_for_what_it_probed(
        tmp_path, linked_dataset):
    """A scan held behind its readers may take hours: unmounted before it ends, the daemon
    saves what it probed in the scan index, and the next mount probes only the rest."""
    config, mountpoint, log, cache, process = start_held(tmp_path, linked_dataset)
    try:
        wait_mounted(mountpoint, process, log)
        (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        assert status_of(mountpoint)["scan"]["datasets"][0]["videos_scanned"] < VIDEOS // 2
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)
    (index,) = cache.glob("scan-*.json")
    saved = len(read_index(index, MediaLimits()))
    assert 0 < saved < VIDEOS // 2
    log = tmp_path / "warm.log"
    process = start_daemon(mountpoint, [config], cache, log)
    try:
        wait_mounted(mountpoint, process, log)
        wait_scanned(mountpoint, process, log)
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)
    assert f" {VIDEOS - saved} probed " in log.read_text()
