"""torchrun on a mount without tasks: `sandfs mount MNT` alone serves, tasks join it, and
examples/torchrun_ddp.py (2 processes, gloo) reads every video exactly once per epoch across
its ranks, each rank its own shard task, all ended when the run is over."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.harness import mount_sandfs, run_cli, task_config, write_config

pytest.importorskip("torch")
from sandfs.torch import join_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchrun_ddp.py"


def test_a_mount_without_tasks_serves_the_tasks_that_join(tmp_path, dataset_dir):
    """`sandfs task add` and `join_task` (outside torchrun: the whole task, held by a lease
    its DataLoader workers' copies never hold) on a mount started without a task."""
    config = write_config(tmp_path / "t0.yaml", task_config(dataset_dir))
    with mount_sandfs(tmp_path, [], extra_args=("--memory-limit", "300M")) as mounted:
        mnt = str(mounted.mountpoint)
        status = json.loads(run_cli("status", mnt, "--json").stdout)
        assert status["tasks"] == {} and status["frames_decoded"] == 0
        assert status["memory_limit_bytes"] == 300 << 20
        added = run_cli("task", "add", mnt, str(config))
        assert added.returncode == 0, added.stderr
        assert (mounted.path("t0", "0", "0", "view")).stat().st_size > 0
        assert run_cli("task", "remove", mnt, "t0").returncode == 0
        with join_task(mnt, config, environ={}) as dataset:
            assert dataset.task == "t0" and len(dataset) == 3
            assert pickle.loads(pickle.dumps(dataset)).lease is None  # a worker's copy
            assert set(json.loads(run_cli("status", mnt, "--json").stdout)["tasks"]) == {"t0"}
        assert json.loads(run_cli("status", mnt, "--json").stdout)["tasks"] == {}
        rank = join_task(mnt, config, environ={"WORLD_SIZE": "2", "RANK": "1"})
        assert rank.task == "t0.r1" and len(rank) == 2  # 6 of the 12 videos, 4 a batch
        rank.close()
    assert "serving" in mounted.log_text()


@pytest.mark.slow
def test_torchrun_ranks_read_each_video_once_per_epoch(tmp_path, dataset_dir):
    config = write_config(tmp_path / "ddp.yaml", task_config(dataset_dir, task="ddp"))
    videos = sorted(str(p.relative_to(dataset_dir).with_suffix(""))
                    for p in dataset_dir.rglob("*.mp4"))
    with mount_sandfs(tmp_path, []) as mounted:
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc-per-node", "2", str(EXAMPLE), str(mounted.mountpoint), str(config)],
            capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        status = json.loads(run_cli("status", str(mounted.mountpoint), "--json").stdout)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 2
    assert len(result["reads_per_video"]) == 3  # every epoch of the task
    for reads in result["reads_per_video"]:
        assert reads == dict.fromkeys(videos, 1)
    assert status["tasks"] == {}  # both ranks' tasks ended with their processes
