"""Mount first, scan after, through a real mount: a daemon restarted over a stale mount shows
its readers no ENOENT while it scans (they wait), status.json shows the scan meanwhile, also to
a first look while a reader waits on a task path, the scan's worker processes never hold
/dev/fuse, and a scan that fails or is interrupted unmounts cleanly."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from sandfs.media.synth import write_test_video
from tests.helpers.harness import (
    Mounted,
    forgiving_teardown,
    is_mounted,
    mount_sandfs,
    require_fuse,
    run_cli,
    start_daemon,
    status_of,
    strict_teardown,
    task_config,
    wait_mounted,
    write_config,
)

SCAN_VIDEOS = 1500  # copies of one small video: a startup scan of a few seconds
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def large_dataset(tmp_path_factory) -> Path:
    """Matroska copies: their packets are demuxed and counted (an MP4's sample tables are read
    10x faster, too fast for a scan to be watched)."""
    root = tmp_path_factory.mktemp("large") / "videos"
    source = root.parent / "source.mkv"
    write_test_video(source, num_frames=30, width=64, height=48, gop=12, noise=True)
    for i in range(SCAN_VIDEOS):
        folder = root / f"class{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / f"v{i:04d}.mkv")
    return root


@pytest.fixture
def large_config(tmp_path, large_dataset) -> Path:
    """A task skipping short videos: its mount serves once every video is probed (a lazy
    scan's startup is the listing alone: tests/mount/test_cold_mount.py)."""
    config = task_config(large_dataset, epochs=1, sampling={"short_video": "skip"})
    config["dataset"]["extensions"] = [".mkv"]
    return write_config(tmp_path / "large.yaml", config)


def wait_for_phase(mountpoint: Path, process: subprocess.Popen, phase: str) -> dict:
    """status.json once `process`'s scan is in `phase`; until its mount is made, the file is
    missing (or, over a stale mount, cannot be read)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status = status_of(mountpoint)
            if status["pid"] == process.pid and status["scan"]["phase"] == phase:
                return status
        assert process.poll() is None, f"the daemon exited with {process.returncode}"
        time.sleep(0.01)
    pytest.fail(f"no scan phase {phase!r} within {TIMEOUT}s")


def mounted_at(log: Path) -> float:
    """When the daemon mounted (epoch seconds), from its log line written right after."""
    line = next(line for line in log.read_text().splitlines() if "; scanning " in line)
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp() + 0.001  # the stamp is cut to the millisecond


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                out.append(int(entry))
    return out


def open_files(pid: int) -> set[str]:
    links = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return links


class Reader(threading.Thread):
    """Reads one view again and again, noting when each read began and what it got."""

    def __init__(self, view: Path) -> None:
        super().__init__(daemon=True)
        self.view = view
        self.stop = threading.Event()
        self.outcomes: list[tuple[float, bytes | int]] = []  # (began, bytes or errno)

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.time()
            try:
                got: bytes | int = self.view.read_bytes()
            except OSError as exc:
                got = exc.errno
            self.outcomes.append((began, got))
            time.sleep(0.01)


def test_a_restart_over_a_stale_mount_shows_readers_no_enoent(tmp_path, large_config):
    require_fuse()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    view = mountpoint / "t0" / "0" / "0" / "view"
    first = start_daemon(mountpoint, [large_config], tmp_path / "c1", tmp_path / "first.log")
    second = None
    reader = Reader(view)
    try:
        wait_mounted(mountpoint, first, tmp_path / "first.log")
        expected = view.read_bytes()
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        # reading from here on: a read the first daemon had taken when it died would wait,
        # uninterruptible, until the stale mount goes, and could span the whole scan
        reader.start()
        time.sleep(0.2)  # readers meet the dead daemon: ENOTCONN
        # a fresh cache dir: the second daemon scans every video again
        second = start_daemon(mountpoint, [large_config], tmp_path / "c2",
                              tmp_path / "second.log")
        scanning = wait_for_phase(mountpoint, second, "scanning")  # the reader waits in t0/
        assert scanning["tasks"] == {}
        wait_mounted(mountpoint, second, tmp_path / "second.log")
        ready_at = time.time()
        time.sleep(0.3)
        reader.stop.set()
        reader.join(timeout=TIMEOUT)
        remounted = mounted_at(tmp_path / "second.log")
        before = {got for began, got in reader.outcomes if began < remounted}
        assert errno.ENOTCONN in before or errno.ECONNABORTED in before  # the dead daemon's
        after = [(began, got) for began, got in reader.outcomes if began > remounted]
        assert [got for _, got in after if not isinstance(got, bytes)] == []  # no ENOENT
        assert all(got == expected for _, got in after)
        # served by the second daemon (the first was dead before the reader began) although
        # asked before it served: it waited through the scan (it may have begun just before
        # the mount's log line, which is written once the mount is made)
        waited = [began for began, got in reader.outcomes if began < ready_at and got == expected]
        assert waited, "no read began during the scan: it was too short to test anything"
        strict_teardown(Mounted(mountpoint, second, tmp_path / "second.log", tmp_path / "c2"))
    finally:
        reader.stop.set()
        forgiving_teardown(mountpoint, first)
        forgiving_teardown(mountpoint, second)


def waiting_in_the_kernel(thread: threading.Thread) -> bool:
    """Is `thread` asleep in a system call (its kernel wait channel named)?"""
    with open(f"/proc/self/task/{thread.native_id}/wchan") as f:
        return f.read().strip() not in ("", "0")


def test_a_first_look_at_status_answers_while_a_reader_waits_for_the_scan(tmp_path,
                                                                         large_config):
    """The kernel serializes lookups in one directory: a reader waiting for the scan holds
    t0/ (its directory answers at once from the config), never `/`, so a first lookup of
    .sand, made while the reader waits, answers with the scan's progress."""
    require_fuse()
    mountpoint, log = tmp_path / "mnt", tmp_path / "daemon.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [large_config], tmp_path / "cache", log)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(
        (mountpoint / "t0" / "0" / "0" / "view").read_bytes()), daemon=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not is_mounted(mountpoint):  # nothing looks up .sand before the reader
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.01)
        reader.start()
        while reader.is_alive() and not waiting_in_the_kernel(reader):
            time.sleep(0.01)
        time.sleep(0.2)  # well inside its lookup of t0/0, in the daemon's gate
        status = status_of(mountpoint)
        assert status["pid"] == process.pid
        assert status["scan"]["phase"] == "scanning", status["scan"]
        assert reader.is_alive(), "the read did not wait for the scan"
        reader.join(timeout=TIMEOUT)
        assert got and got[0] == (mountpoint / "t0" / "0" / "0" / "view").read_bytes()
        assert os.stat(mountpoint / "t0").st_mode & 0o777 == 0o500  # as it answered early
        strict_teardown(Mounted(mountpoint, process, log, tmp_path / "cache"))
    finally:
        forgiving_teardown(mountpoint, process)
        reader.join(timeout=TIMEOUT)


def test_status_shows_the_scan_and_its_workers_hold_no_fuse_fd(tmp_path, large_config,
                                                              large_dataset):
    require_fuse()
    mountpoint, log = tmp_path / "mnt", tmp_path / "daemon.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [large_config], tmp_path / "cache", log)
    try:
        first = wait_for_phase(mountpoint, process, "scanning")
        assert first["tasks"] == {} and first["bad_videos"] == []
        assert "/dev/fuse" in open_files(process.pid)  # what a leak would look like
        deadline = time.monotonic() + TIMEOUT
        while not (workers := children_of(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.005)  # the files are listed before the workers start
        assert status_of(mountpoint)["scan"]["phase"] == "scanning"
        assert workers, "no probe worker process while scanning"
        for worker in workers:
            assert "/dev/fuse" not in open_files(worker), f"worker {worker} holds /dev/fuse"
        human = run_cli("status", str(mountpoint))
        assert human.returncode == 0 and "scanning" in human.stdout, human.stdout
        samples = []
        while (status := status_of(mountpoint))["scan"]["phase"] != "ready":
            samples.append(status["scan"])
            time.sleep(0.02)
        scanned = [s["videos_scanned"] for s in samples if s["phase"] == "scanning"]
        assert scanned == sorted(scanned) and max(scanned, default=1) > 0
        dataset = next(s for s in samples if s["videos_total"])["datasets"][0]
        assert dataset["path"] == str(large_dataset) and dataset["videos_total"] == SCAN_VIDEOS
        # serving may begin as the last probe's result lands, before its count is published
        settled = time.monotonic() + TIMEOUT
        while (done := status_of(mountpoint)["scan"])["videos_scanned"] < SCAN_VIDEOS:
            assert time.monotonic() < settled, done
            time.sleep(0.02)
        assert (done["videos_scanned"], done["videos_total"]) == (SCAN_VIDEOS, SCAN_VIDEOS)
        assert done["error"] is None and done["seconds"] > 0 and "t0" in status["tasks"]
        # one bound, however far the startup is
        assert first["memory_limit_bytes"] == status["memory_limit_bytes"] > 0
        strict_teardown(Mounted(mountpoint, process, log, tmp_path / "cache"))
    finally:
        forgiving_teardown(mountpoint, process)


@pytest.mark.parametrize("how", ["sigterm", "unmount"])
def test_a_stop_during_the_scan_unmounts_and_ends_its_workers(tmp_path, large_config, how):
    require_fuse()
    mountpoint, log = tmp_path / "mnt", tmp_path / "daemon.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [large_config], tmp_path / "cache", log)
    try:
        wait_for_phase(mountpoint, process, "scanning")
        while not (workers := children_of(process.pid)):
            time.sleep(0.005)  # stopped while probing
        if how == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            subprocess.run(["fusermount3", "-u", str(mountpoint)], check=True)
        assert process.wait(timeout=15) == 0, log.read_text()[-2000:]
        assert not is_mounted(mountpoint)
        for worker in workers:
            assert not os.path.exists(f"/proc/{worker}"), "a probe worker outlived the daemon"
    finally:
        forgiving_teardown(mountpoint, process)


def junk_dataset(root: Path, count: int) -> Path:
    root.mkdir()
    for i in range(count):
        (root / f"junk{i:04d}.mp4").write_text("not a video\n" * 20)
    return root


def test_a_scan_that_fails_unmounts_releases_its_waiters_and_reports(tmp_path):
    require_fuse()
    config = write_config(tmp_path / "junk.yaml", task_config(  # a whole scan, as large_config
        junk_dataset(tmp_path / "junk", SCAN_VIDEOS), sampling={"short_video": "skip"}))
    mountpoint, log = tmp_path / "mnt", tmp_path / "daemon.log"
    mountpoint.mkdir()
    process = start_daemon(mountpoint, [config], tmp_path / "cache", log)
    try:
        wait_for_phase(mountpoint, process, "scanning")
        with pytest.raises(OSError) as caught:  # waits for the scan, then fails: no hang
            os.stat(mountpoint / "t0" / "0")
        assert caught.value.errno in (errno.EIO, errno.ENOENT)  # ENOENT: unmounted first
        assert process.wait(timeout=TIMEOUT) == 1
        assert not is_mounted(mountpoint)
        last = log.read_text().strip().splitlines()[-1]
        assert last.startswith("sandfs: ") and "no usable videos" in last, last
    finally:
        forgiving_teardown(mountpoint, process)
    # `sandfs mount` in the background: the same one line and exit status as before mounting
    done = run_cli("mount", str(mountpoint), "--config", str(config), "--cache-dir",
                   str(tmp_path / "cache"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sandfs: ") and "no usable videos" in lines[0]
    assert not is_mounted(mountpoint)


def test_a_dataset_link_into_the_mount_does_not_deadlock_the_scan(tmp_path, dataset_dir):
    """The scan stats a link that points into the mount while the mount waits for the scan:
    the daemon's own request is refused at once (EDEADLK) and the file left out."""
    dataset = tmp_path / "linked"
    shutil.copytree(dataset_dir, dataset)
    os.symlink(tmp_path / "mnt" / "t0" / "0" / "0" / "view", dataset / "loop.mp4")
    config = write_config(tmp_path / "t.yaml", task_config(dataset))
    with mount_sandfs(tmp_path, [config]) as mounted:
        status = json.loads(mounted.path(".sand", "status.json").read_bytes())
        bad = {b["path"]: b for b in status["bad_videos"]}
        assert bad["loop.mp4"]["reason"] in ("open_invalid", "outside_root"), bad
        assert os.listdir(mounted.path("t0", "0"))
