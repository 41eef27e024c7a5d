"""Custom steps out of process through a real mount: a plug-in found by its entry point (the
example package in examples/plugin) serves the reference bytes, and a step that segfaults or
hangs fails only its own task's views (EIO, the reason in status.json) while the daemon and the
other task go on, though both tasks share each video's decode pass; nothing is left in /dev/shm
or the process table."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sandfs import ops as oplib
from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.ops import isolated
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import LOG_ERROR, mount_sandfs, task_config, write_config
from tests.helpers.processes import segments_of
from tests.helpers.reference import reference_view

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "examples" / "plugin" / "src"
TESTS = REPO / "tests"


def plugin_site(root: Path) -> Path:
    """A folder that makes the example plug-in and the test ops look installed: a dist-info
    with their `sandfs.ops` entry points (put on the daemon's PYTHONPATH)."""
    info = root / "site" / "sandfs_test_plugins-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sandfs-test-plugins\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text("[sandfs.ops]\nbox_blur = sandfs_box_blur:BoxBlur\n"
                                           "test_misbehave = custom_ops:Misbehave\n")
    return info.parent


def single(name, inputs, outputs, *ops):
    return {"name": name, "branch_type": "single", "inputs": inputs, "outputs": outputs,
            "config": list(ops)}


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["segfault", "hang"])
def test_a_failing_custom_step_fails_only_its_views(tmp_path, dataset_dir, how, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    from sandfs_box_blur import BoxBlur
    if "box_blur" not in oplib.op_names():
        oplib.register_op(BoxBlur)
    videos = tmp_path / "shared" / "videos"  # one dataset: every decode pass serves both
    shutil.copytree(dataset_dir / "archery", videos / "archery")
    blur = write_config(tmp_path / "blur.yaml", task_config(videos, task="blur", augmentation=[
        single("resize", ["frame"], ["r"], {"resize": {"shape": [36, 48]}}),
        single("blur", ["r"], ["b"], {"box_blur": {"size": 3}}, {"center_crop": {"size": 32}})]))
    bad = write_config(tmp_path / "bad.yaml", task_config(videos, task="bad", augmentation=[
        single("resize", ["frame"], ["r"], {"resize": {"shape": [32, 32]}}),
        single("misbehave", ["r"], ["o"], {"test_misbehave": {"how": how}})]))
    site = plugin_site(tmp_path)
    path = os.pathsep.join([str(REPO), str(TESTS), str(PLUGIN_SRC), str(site)])
    with mount_sandfs(tmp_path, [blur, bad], env={"PYTHONPATH": path}) as mounted:
        started = time.monotonic()
        with pytest.raises(OSError) as caught, open(mounted.path("bad", "0", "0", "view"),
                                                    "rb") as f:
            f.read()
        assert caught.value.errno == errno.EIO
        assert time.monotonic() - started < 30  # within the op's 1.5 s timeout, and a spawn
        cfg = load_task_config(blur)
        plan = TaskPlan(cfg, scan_dataset(cfg.dataset.video_dataset_path,
                                          cfg.dataset.extensions).videos, k_epochs=2)
        for iteration in range(plan.iterations_per_epoch):
            with open(mounted.path("blur", "0", str(iteration), "view"), "rb") as f:
                assert f.read() == reference_view(plan, 0, iteration)
        assert mounted.process.poll() is None  # the daemon serves on
        status = json.loads(mounted.path(".sand", "status.json").read_text())
        daemon = status["pid"]
        reason = "signal SIGSEGV" if how == "segfault" else "no result within timeout_s"
        logged_reason = {"segfault": "its worker process died", "hang": "no result"}
        assert any(reason in r for r in status["isolated_ops"]["failures"])
        assert status["isolated_ops"]["calls"] > 0
        tasks = status["tasks"]
        assert tasks["bad"]["failed_views"] > 0 and reason in tasks["bad"]["view_error"]
        assert tasks["blur"]["failed_views"] == 0 and tasks["blur"]["view_error"] is None
        assert [f["task"] for f in status["failures"]] == ["bad"]
        assert reason in status["failures"][0]["reason"]
        subprocess.run(["fusermount3", "-u", str(mounted.mountpoint)], check=True)
        assert mounted.process.wait(timeout=30) == 0
        # each failed view of the bad task is logged once (those the scheduler made): only those
        errors = [line for line in mounted.log_text().splitlines() if LOG_ERROR.search(line)]
        logged = f"failed: WorkerLost: isolated op test_misbehave: {logged_reason[how]}"
        assert errors and all("task bad view" in line and logged in line for line in errors)
        mounted.expected_log_errors = len(errors)
    isolated.shutdown()
    assert processes_with(str(site)) == []
    assert segments_of(daemon) == set()
