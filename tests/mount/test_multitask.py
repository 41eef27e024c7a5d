"""Several tasks on one mount: shared decoding, shared views for identical pipelines, each task's
own data-access rules, and every view equal to the independent reference."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandfs.config.loader import load_task_configs
from sandfs.media.scan import scan_dataset
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import mount_sandfs, run_cli, task_config, write_config
from tests.helpers.plans import build_plans
from tests.helpers.reference import reference_view


def plan_joined(first_path, joining_path, mount_epoch: int):
    """The plans of the first task and of a task that joined the mount when the first task stood
    at `mount_epoch`, after the first had frozen windows 0 and 1."""
    first = build_plans([first_path])["first"]
    for window in (0, 1):
        first.plan_key(window)  # freezes the window's coordination with the first task alone
    cfg = load_task_configs([joining_path])[0]
    first.coordination.join(cfg, mount_epoch)
    found = scan_dataset(cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    return first, TaskPlan(cfg, found.videos, k_epochs=first.k_epochs,
                           coordination=first.coordination)


def status(m) -> dict:
    return json.loads(m.path(".sand", "status.json").read_bytes())


def read_task(m, plan) -> dict:
    out = {}
    for epoch in range(plan.epochs):
        for iteration in range(plan.iterations_per_epoch):
            out[(epoch, iteration)] = m.path(plan.name, str(epoch), str(iteration),
                                             "view").read_bytes()
    return out


def test_heterogeneous_tasks_share_decoding_and_match_the_reference(tmp_path, dataset_dir):
    slow = task_config(dataset_dir, task="slow", seed=1,
                       sampling={"frames_per_video": 6, "frame_stride": 2})
    mae = task_config(dataset_dir, task="mae", seed=2,
                      sampling={"frames_per_video": 3, "frame_stride": 4,
                                "samples_per_video": 2})
    paths = [write_config(tmp_path / "slow.yaml", slow), write_config(tmp_path / "mae.yaml", mae)]
    plans = build_plans(paths)
    with mount_sandfs(tmp_path, paths) as m:
        with ThreadPoolExecutor(2) as pool:
            views = dict(zip(plans, pool.map(lambda p: read_task(m, p), plans.values()),
                             strict=True))
        figures = status(m)
    for name, plan in plans.items():
        for (epoch, iteration), data in views[name].items():
            assert data == reference_view(plan, epoch, iteration), (name, epoch, iteration)
        for epoch in range(plan.epochs):
            seen = [plan.videos[c.video_index].name
                    for i in range(plan.iterations_per_epoch)
                    for c in plan.view_plan(epoch, i).clips]
            per_video = len(seen) // len(plan.videos)
            assert per_video == plan.sampling.samples_per_video
            assert sorted(set(seen)) == sorted(v.name for v in plan.videos)
    assert figures["frames_decoded"] < figures["frames_decoded_independent"]
    assert figures["aug_ops"] < figures["aug_ops_independent"]  # the shared resize


def test_identical_pipelines_are_materialized_once(tmp_path, dataset_dir):
    paths = [write_config(tmp_path / f"t{i}.yaml", task_config(dataset_dir, task=f"trial{i}"))
             for i in range(4)]
    single = write_config(tmp_path / "one.yaml", task_config(dataset_dir, task="trial0"))
    plans = build_plans(paths)
    with mount_sandfs(tmp_path, [single], name="one") as m:
        read_task(m, plans["trial0"])
        alone = status(m)
    with mount_sandfs(tmp_path, paths, name="four") as m:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda p: read_task(m, p), plans.values()))
        together = status(m)
    assert all(r == results[0] for r in results)  # byte-identical batches
    assert together["views_materialized"] == alone["views_materialized"]
    assert together["frames_decoded"] == alone["frames_decoded"]  # each frame once per window
    assert together["frames_decoded_independent"] == 4 * alone["frames_decoded_independent"]
    assert together["aug_ops"] == alone["aug_ops"]
    assert together["aug_ops_independent"] == 4 * alone["aug_ops_independent"]
    for name in plans:
        assert together["tasks"][name]["views_served"] == len(results[0])


def test_a_restart_plans_frozen_windows_as_before(tmp_path, dataset_dir):
    """Window 0 was planned with two tasks; a restart with one of them keeps its views."""
    slow = write_config(tmp_path / "slow.yaml", task_config(
        dataset_dir, task="slow", seed=1, sampling={"frames_per_video": 6, "frame_stride": 2}))
    other = write_config(tmp_path / "other.yaml", task_config(
        dataset_dir, task="other", seed=2, sampling={"frames_per_video": 3, "frame_stride": 3}))
    plans = build_plans([slow])
    with mount_sandfs(tmp_path, [slow, other]) as m:
        together = {i: m.path("slow", "0", str(i), "view").read_bytes()
                    for i in range(plans["slow"].iterations_per_epoch)}
    assert (tmp_path / "mnt-cache" / "plan-state.json").exists()
    with mount_sandfs(tmp_path, [slow]) as m:  # same cache dir: the checkpoint is loaded
        again = {i: m.path("slow", "0", str(i), "view").read_bytes() for i in together}
    with mount_sandfs(tmp_path, [slow], name="fresh") as m:  # no checkpoint: planned alone
        alone = {i: m.path("slow", "0", str(i), "view").read_bytes() for i in together}
    assert again == together
    assert alone != together  # the other task changed the shared pool (stride GCD 1)


def test_tasks_join_and_leave_a_live_mount(tmp_path, dataset_dir):
    first = write_config(tmp_path / "first.yaml", task_config(dataset_dir, task="first"))
    trial = task_config(dataset_dir, task="trial3", seed=5)
    (tmp_path / "sub").mkdir()
    # relative to its file, through a symlink: the same real directory, so they share pools
    trial["dataset"]["video_dataset_path"] = "../" + dataset_dir.name
    (tmp_path / dataset_dir.name).symlink_to(dataset_dir)
    trial_path = write_config(tmp_path / "sub" / "trial3.yaml", trial)
    with mount_sandfs(tmp_path, [first]) as m:
        before = m.path("first", "0", "0", "view").read_bytes()
        m.path("first", "1", "0", "view").read_bytes()  # the first task stands at epoch 1
        done = run_cli("task", "add", str(m.mountpoint), str(trial_path))
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [  # its engine: section (k_epochs 2) is not used
            "sandfs: engine: settings of a task added to a live mount are ignored: k_epochs, "
            "workers of task trial3 (the mount's own are kept)"]
        assert sorted(os.listdir(m.mountpoint)) == [".sand", "first", "trial3"]
        assert sorted(os.listdir(m.path(".sand", "tasks"))) == ["first.yaml", "trial3.yaml"]
        leader, joined = plan_joined(first, trial_path, mount_epoch=1)
        assert joined.epoch_offset == 1  # its epoch 0 is planned with the first's epoch 1
        for video in range(len(joined.videos)):
            assert joined.clip_frames(0, video, 0) == leader.clip_frames(1, video, 0)
        for epoch in range(joined.epochs):
            for iteration in range(joined.iterations_per_epoch):
                view = m.path("trial3", str(epoch), str(iteration), "view")
                assert os.stat(view).st_size == joined.view_nbytes(epoch, iteration)
                assert view.read_bytes() == reference_view(joined, epoch, iteration)
        assert m.path("first", "0", "0", "view").read_bytes() == before  # unchanged
        again = run_cli("task", "add", str(m.mountpoint), str(trial_path))
        assert again.returncode == 1 and "already registered" in again.stderr
        done = run_cli("task", "remove", str(m.mountpoint), "trial3")
        assert done.returncode == 0, done.stderr
        assert sorted(os.listdir(m.mountpoint)) == [".sand", "first"]
        assert not m.path("trial3").exists()
        gone = run_cli("task", "remove", str(m.mountpoint), "trial3")
        assert gone.returncode == 1 and "no task" in gone.stderr
        # writing a YAML by hand registers too; a bad one is refused with the reason in status
        broken = m.path(".sand", "tasks", "bad.yaml")
        with pytest.raises(OSError):
            broken.write_text("task: bad\nseed: x\n")
        assert "bad.yaml:1:1: epochs: required key is missing" in status(m)["task_errors"]["bad"]
        assert not m.path("bad").exists()
        os.unlink(m.path(".sand", "tasks", "first.yaml"))
        assert os.listdir(m.mountpoint) == [".sand"]
