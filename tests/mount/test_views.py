"""Batch views through a real mount: tree, bytes, sizes, metadata, coverage, determinism."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.harness import mount_sandfs, task_config, write_config
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view
from tests.helpers.reliability import record


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def meta(path) -> dict:
    return json.loads(os.getxattr(path, "user.sand.meta"))


def all_views(mounted, plan):
    return [(e, i, mounted.path("t0", str(e), str(i), "view"))
            for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)]


def test_tree_lists_epochs_iterations_and_videos(mounted, config_path):
    plan = build_plan(config_path)
    assert sorted(os.listdir(mounted.mountpoint)) == [".sand", "t0"]
    assert sorted(os.listdir(mounted.path("t0"))) == sorted(["videos", "0", "1", "2"])
    assert os.listdir(mounted.path("t0", "0")) == [str(i) for i in range(3)]
    assert sorted(os.listdir(mounted.path("t0", "0", "2"))) == ["meta.json", "view"]
    assert sorted(os.listdir(mounted.path("t0", "videos"))) == sorted(
        ["archery", "bowling", "juggling"])
    names = sorted(os.listdir(mounted.path("t0", "videos", "archery")))
    assert names == sorted([f"archery_{i:03d}{ext}" for i in range(4) for ext in ("", ".mp4")])
    assert plan.iterations_per_epoch == 3


def test_views_match_the_reference_byte_for_byte(mounted, config_path):
    plan = build_plan(config_path)
    for epoch, iteration, path in all_views(mounted, plan):
        expected = reference_view(plan, epoch, iteration)
        assert os.stat(path).st_size == len(expected)  # exact before and after materializing
        got = read(path)
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest(), (
            f"view {epoch}/{iteration} differs from the reference")
        assert meta(path) == plan.view_meta(plan.view_plan(epoch, iteration))


def test_view_shape_dtype_and_painted_frames(mounted, config_path):
    plan = build_plan(config_path)
    path = mounted.path("t0", "0", "0", "view")
    size_before = os.stat(path).st_size
    batch = np.load(io.BytesIO(read(path)))
    assert batch.shape == (4, 4, 32, 32, 3) and batch.dtype == np.uint8
    assert size_before == len(read(path))
    last = mounted.path("t0", "0", str(plan.iterations_per_epoch - 1), "view")
    assert np.load(io.BytesIO(read(last))).shape == (4, 4, 32, 32, 3)  # 12 videos / 4


def test_a_view_maps_into_memory_as_numpy_maps_npy_files(mounted, config_path):
    """`np.load(path, mmap_mode="r")` (a shared read-only mapping) works on a view and gives
    the reference array: views are never opened with direct_io, which makes the kernel refuse
    shared mappings (ENODEV) without an init flag libfuse 3.14 cannot set
    (docs/performance.md#the-readers-side)."""
    plan = build_plan(config_path)
    path = mounted.path("t0", "1", "0", "view")
    mapped = np.load(path, mmap_mode="r")
    expected = np.load(io.BytesIO(reference_view(plan, 1, 0)))
    assert isinstance(mapped, np.memmap) and np.array_equal(mapped, expected)


def test_every_video_exactly_once_per_epoch(mounted, config_path):
    plan = build_plan(config_path)
    expected = sorted(v.name for v in plan.videos)
    orders = []
    for epoch in range(plan.epochs):
        seen = [s["video"] for i in range(plan.iterations_per_epoch)
                for s in meta(mounted.path("t0", str(epoch), str(i), "view"))["samples"]]
        assert sorted(seen) == expected
        orders.append(seen)
    assert orders[0] != orders[1], "epochs must reshuffle"


def test_xattrs(mounted):
    path = mounted.path("t0", "1", "0", "view")
    names = set(os.listxattr(path))
    assert names == {"user.sand.meta", "user.sand.labels", "user.sand.state", "user.sand.readers"}
    assert os.getxattr(path, "user.sand.readers") == b"1"
    assert os.getxattr(path, "user.sand.state") in (b"planned", b"materializing", b"ready")
    read(path)
    assert os.getxattr(path, "user.sand.state") == b"ready"
    info = meta(path)
    labels = json.loads(os.getxattr(path, "user.sand.labels"))
    assert labels == [s["label"] for s in info["samples"]]
    assert set(labels) <= {"archery", "bowling", "juggling"}
    for sample in info["samples"]:
        assert sample["label_index"] == ["archery", "bowling", "juggling"].index(sample["label"])
        assert len(sample["frame_indices"]) == 4
        assert np.all(np.diff(sample["frame_indices"]) == 2)
        assert sample["timestamps"] == pytest.approx([i / 25 for i in sample["frame_indices"]])
        x, y, w, h = sample["crop"]
        assert x >= 0 and y >= 0 and x + w <= 64 and y + h <= 48
        assert isinstance(sample["flip"], bool) and sample["rotation"] == 0
    assert (info["task"], info["epoch"], info["iteration"]) == ("t0", 1, 0)
    assert info["shape"] == [4, 4, 32, 32, 3] and info["dtype"] == "uint8"
    with pytest.raises(OSError) as caught:
        os.getxattr(path, "user.sand.nope")
    assert caught.value.errno == errno.ENODATA


def test_unknown_and_non_canonical_names_are_enoent(mounted):
    for parts in [("nope",), ("t0", "3"), ("t0", "01"), ("t0", "+1"), ("t0", " 1"),
                  ("t0", "1_0"), ("t0", "١"), ("t0", "0", "3"), ("t0", "0", "0", "views"),
                  ("t0", "999999999"), ("t0", "99999999999999999999"), ("t0", "-1")]:
        with pytest.raises(FileNotFoundError):
            os.stat(mounted.path(*parts))


def test_writes_fail_with_erofs(mounted):
    view = mounted.path("t0", "0", "0", "view")
    attempts = [
        lambda: open(view, "r+b"),  # noqa: SIM115
        lambda: open(mounted.path("t0", "new"), "wb"),  # noqa: SIM115
        lambda: os.mkdir(mounted.path("t0", "d")),
        lambda: os.unlink(view),
        lambda: os.rename(view, mounted.path("t0", "0", "0", "v2")),
        lambda: os.setxattr(view, "user.sand.meta", b"{}"),
        lambda: os.truncate(view, 0),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as caught:
            attempt()
        assert caught.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    assert not os.path.exists(mounted.path("t0", "new"))


def test_concurrent_readers_with_random_read_sizes(mounted, config_path):
    plan = build_plan(config_path)
    views = all_views(mounted, plan)
    expected = {str(p): reference_view(plan, e, i) for e, i, p in views}

    def reader(seed: int) -> int:
        rng = random.Random(seed)
        checked = 0
        for _, _, path in rng.sample(views, len(views)):
            want = expected[str(path)]
            with open(path, "rb") as f:
                for _ in range(3):
                    offset = rng.randrange(len(want))
                    size = rng.choice([1, 7, 4096, 65536, 1 << 20, 4 << 20])
                    f.seek(offset)
                    assert f.read(size) == want[offset : offset + size]
                    checked += 1
        return checked

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(reader, range(8))) == 8 * 3 * len(views)


def test_same_seed_same_views_in_any_order_other_seed_differs(tmp_path, dataset_dir):
    config = write_config(tmp_path / "a.yaml", task_config(dataset_dir))
    other = write_config(tmp_path / "b.yaml", task_config(dataset_dir, seed=7))
    plan = build_plan(config)
    keys = [(e, i) for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)]
    with mount_sandfs(tmp_path, [config], name="m1") as m1:
        first = {k: read(m1.path("t0", str(k[0]), str(k[1]), "view")) for k in keys}
    with mount_sandfs(tmp_path, [config], name="m2") as m2:
        second = {k: read(m2.path("t0", str(k[0]), str(k[1]), "view")) for k in reversed(keys)}
    assert first == second
    with mount_sandfs(tmp_path, [other], name="m3") as m3:
        orders = [[s["video"] for s in meta(m3.path("t0", "0", str(i), "view"))["samples"]]
                  for i in range(plan.iterations_per_epoch)]
        third = read(m3.path("t0", "0", "0", "view"))
    first_order = [[s["video"] for s in plan.view_meta(plan.view_plan(0, i))["samples"]]
                   for i in range(plan.iterations_per_epoch)]
    assert orders != first_order and third != first[(0, 0)]


def test_status_json(mounted):
    read(mounted.path("t0", "0", "0", "view"))
    status = json.loads(read(mounted.path(".sand", "status.json")))
    for key in ("version", "uptime_seconds", "pid", "workers", "memory_bytes", "tasks",
                "frames_decoded", "frames_decoded_independent", "views_materialized", "cache",
                "queues", "bad_videos"):
        assert key in status
    assert status["pid"] == mounted.process.pid
    task = status["tasks"]["t0"]
    assert task["views_served"] >= 1 and (task["epoch"], task["iteration"]) == (0, 0)
    assert status["frames_decoded"] > 0 and status["views_materialized"] >= 1
    assert read(mounted.path(".sand", "tasks", "t0.yaml")).startswith(b"task: t0")


def test_drop_last_and_samples_per_video(tmp_path, dataset_dir):
    config = write_config(tmp_path / "t.yaml", task_config(
        dataset_dir, sampling={"videos_per_batch": 5, "drop_last": True, "samples_per_video": 2}))
    plan = build_plan(config)
    assert plan.iterations_per_epoch == 2  # 12 videos, batches of 5, the last 2 dropped
    with mount_sandfs(tmp_path, [config]) as m:
        assert os.listdir(m.path("t0", "0")) == ["0", "1"]
        for i in range(2):
            path = m.path("t0", "0", str(i), "view")
            samples = meta(path)["samples"]
            assert len(samples) == 10
            counts = Counter(s["video"] for s in samples)
            assert set(counts.values()) == {2}
            assert read(path) == reference_view(plan, 0, i)


def test_no_fd_or_thread_leak_over_epochs(mounted, config_path):
    """The daemon's open files and threads stay flat while views are read."""
    plan = build_plan(config_path)
    pid = mounted.process.pid

    def counts() -> tuple[int, int]:
        return (len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task")))

    def read_epoch(epoch: int) -> None:
        for iteration in range(plan.iterations_per_epoch):
            read(mounted.path("t0", str(epoch), str(iteration), "view"))
            read(mounted.path("t0", "videos", "archery", "archery_000.mp4"))

    read_epoch(0)
    fds, threads = counts()
    for epoch in (1, 2):
        read_epoch(epoch)
    later_fds, later_threads = counts()
    assert abs(later_fds - fds) <= 5 and abs(later_threads - threads) <= 5


def test_trainers_running_as_another_user_can_read(dataset_dir):
    """allow_other + default_permissions: a task shared with `access: {mode: '0444'}` (files
    0444, directories 0555) is read by any user."""
    system_python = "/usr/bin/python3"  # the venv's interpreter may live under /root (0700)
    if os.getuid() != 0 or not os.path.exists(system_python):
        pytest.skip("needs root (to switch users) and a system python3")
    workdir = Path(tempfile.mkdtemp(prefix="sandfs-users-", dir="/tmp"))
    workdir.chmod(0o755)  # pytest's tmp dirs are 0700: another user could not reach the mount
    try:
        shared = task_config(dataset_dir, access={"mode": "0444"})
        with mount_sandfs(workdir, [write_config(workdir / "shared.yaml", shared)]) as m:
            view = m.path("t0", "0", "0", "view")
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         system_python, "-c"]
            script = ("import os, sys; p = sys.argv[1]; data = open(p, 'rb').read(); "
                      "os.getxattr(p, 'user.sand.meta'); print(len(data))")
            done = subprocess.run([*as_nobody, script, str(view)], capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert int(done.stdout) == os.stat(view).st_size
            denied = subprocess.run([*as_nobody, "open(__import__('sys').argv[1], 'r+b')",
                                     str(view)], capture_output=True, text=True, timeout=60)
            assert denied.returncode != 0  # still read-only for everyone
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize("processes", [8, pytest.param(32, marks=pytest.mark.stress)])
def test_concurrent_reader_processes_get_exact_bytes(mounted, config_path, processes):
    plan = build_plan(config_path)
    paths = [str(p) for _, _, p in all_views(mounted, plan)]
    digests = {p: hashlib.sha256(reference_view(plan, e, i)).hexdigest()
               for (e, i, _), p in zip(all_views(mounted, plan), paths, strict=True)}
    script = ("import hashlib, random, sys; paths = sys.argv[2:]; "
              "random.Random(int(sys.argv[1])).shuffle(paths); "
              "[print(p, hashlib.sha256(open(p, 'rb').read()).hexdigest()) for p in paths]")
    readers = [subprocess.Popen([sys.executable, "-c", script, str(seed), *paths],
                                stdout=subprocess.PIPE, text=True) for seed in range(processes)]
    outputs = [reader.communicate(timeout=120) for reader in readers]
    lines = [line.split() for out, _ in outputs for line in out.splitlines()]
    wrong = [path for path, digest in lines if digest != digests[path]]
    failed = sum(reader.returncode != 0 for reader in readers)
    record("concurrent_readers", processes=processes, reads=len(lines),
           errors=failed + len(wrong) + processes * len(paths) - len(lines))
    assert failed == 0 and wrong == []
    assert len(lines) == processes * len(paths)
