"""A warm mount lists its dataset from the scan index (docs/contract.md#warm-listing), through a
real mount: a file added since the index is listed and probed, one removed is not listed, and
one rewritten in place with another size (its folder unchanged) is found `changed`, its slots
filled by its stand-in: no view holds it and every view reads. A FIFO in a listed file's place
is EIO to a raw read, not a hang."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

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

VIDEOS = 48
ADDED, REMOVED, REWRITTEN = "c0/v9999.mp4", "c1/v0004.mp4", "c2/v0005.mp4"


def mounted(mountpoint: Path, config: Path, cache: Path, log: Path):
    process = start_daemon(mountpoint, [config], cache, log)
    wait_mounted(mountpoint, process, log)
    return process


def test_a_warm_mount_lists_files_added_removed_and_rewritten_since_its_index(
        tmp_path, dataset_dir):
    require_fuse()
    sources = sorted(dataset_dir.rglob("*.mp4"))
    root = tmp_path / "videos"
    for i in range(VIDEOS):
        (root / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        place = shutil.copy if f"c{i % 3}/v{i:04d}.mp4" == REWRITTEN else os.link
        place(sources[i % len(sources)], root / f"c{i % 3}/v{i:04d}.mp4")
    config = write_config(tmp_path / "t.yaml", task_config(root, epochs=2))
    mountpoint, cache = tmp_path / "mnt", tmp_path / "cache"
    mountpoint.mkdir()
    process = mounted(mountpoint, config, cache, tmp_path / "cold.log")
    try:
        assert wait_scanned(mountpoint, process, tmp_path / "cold.log")["bad_videos"] == []
        strict_teardown(Mounted(mountpoint, process, tmp_path / "cold.log", cache))
    finally:
        forgiving_teardown(mountpoint, process)
    assert list(cache.glob("scan-*.json"))

    os.link(sources[0], root / ADDED)
    (root / REMOVED).unlink()
    rewritten = root / REWRITTEN
    other = next(s for s in sources if s.stat().st_size != rewritten.stat().st_size)
    folder_mtime = rewritten.parent.stat().st_mtime_ns
    with open(rewritten, "r+b") as file:  # in place: its folder does not change
        file.write(other.read_bytes())
        file.truncate()
    assert rewritten.parent.stat().st_mtime_ns == folder_mtime

    log = tmp_path / "warm.log"
    process = mounted(mountpoint, config, cache, log)
    try:
        status = wait_scanned(mountpoint, process, log)
        assert status["scan"]["datasets"][0]["videos_total"] == VIDEOS  # one in, one out
        assert [(b["path"], b["reason"]) for b in status["bad_videos"]] == [
            (REWRITTEN, "changed")]
        videos = {p.relative_to(mountpoint / "t0" / "videos").as_posix()
                  for p in (mountpoint / "t0" / "videos").rglob("*.mp4")}
        assert ADDED in videos and REMOVED not in videos
        held = set()
        for iteration in range(status["tasks"]["t0"]["iterations_per_epoch"]):
            batch = mountpoint / "t0" / "0" / str(iteration)
            (batch / "view").read_bytes()  # EIO here: a view made from the changed file
            held |= {s["video"] for s in json.loads((batch / "meta.json").read_bytes())["samples"]}
        assert REWRITTEN.removesuffix(".mp4") not in held
        assert ADDED.removesuffix(".mp4") in held and REMOVED.removesuffix(".mp4") not in held
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)


def test_a_fifo_in_a_listed_videos_place_is_eio_to_a_raw_read_not_a_hang(tmp_path, dataset_dir):
    """A FIFO made where an indexed video was (`rm v.mp4; mkfifo v.mp4`): opening its raw bytes
    answers EIO at once, recorded as the task's failure, and never holds a read's thread."""
    require_fuse()
    root = tmp_path / "videos"
    shutil.copytree(dataset_dir, root)
    victim = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.mp4"))[0]
    config = write_config(tmp_path / "t.yaml", task_config(root, epochs=1))
    mountpoint, cache, log = tmp_path / "mnt", tmp_path / "cache", tmp_path / "fifo.log"
    mountpoint.mkdir()
    process = mounted(mountpoint, config, cache, log)
    try:
        wait_scanned(mountpoint, process, log)
        (root / victim).unlink()
        os.mkfifo(root / victim)
        raw = mountpoint / "t0" / "videos" / victim
        outcome: list[BaseException | bytes] = []
        reader = threading.Thread(target=lambda: outcome.append(_read_or_error(raw)),
                                  daemon=True)
        reader.start()
        reader.join(20)
        assert not reader.is_alive(), "the raw read hangs on the FIFO"
        assert isinstance(outcome[0], OSError) and outcome[0].errno == errno.EIO, outcome
        assert [(f["path"], f["reason"]) for f in status_of(mountpoint)["failures"]] == [
            (f"videos/{victim}", "source_unreadable: not a regular file")]
        strict_teardown(Mounted(mountpoint, process, log, cache))
    finally:
        forgiving_teardown(mountpoint, process)


def _read_or_error(path: Path) -> BaseException | bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        return error
