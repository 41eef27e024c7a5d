"""sandfs.ray on a local two-node Ray cluster (loopback), one sandfs mount per node: rank
shards from Ray Train cover each epoch exactly once, each node plans only its own ranks, a
SIGKILLed trial's task ends within seconds, and stop_daemons leaves nothing behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from ray.cluster_utils import Cluster

import sandfs.ray as sandray
from sandfs.config.schema import Shard
from sandfs.pids import running
from tests.helpers.harness import require_fuse, task_config

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
WORLD_SIZE = 4
KILLED_TASK_GONE_SECONDS = 10.0
STATUS = ".sand/status.json"


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [m for line in f if (m := line.split()[4]).startswith(str(root) + os.sep)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two Ray nodes on this machine, each with 2 CPUs; torn down however the tests end."""
    require_fuse()
    root = tmp_path_factory.mktemp("raycluster")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        yield root
    finally:
        with contextlib.suppress(Exception):
            sandray.stop_daemons()
        ray.shutdown()
        cluster.shutdown()
        for mount in mounts_under(root):  # only after a failure: never leave a mount
            subprocess.run(["fusermount3", "-uz", mount], capture_output=True)


def settings_in(root: Path, run: str) -> sandray.DaemonSettings:
    return sandray.DaemonSettings(mountpoint=f"{root}/{run}/{{node}}/mnt",
                                  cache_dir=f"{root}/{run}/{{node}}/cache",
                                  mount_args=("--workers", "1"))


def read_rank(config: dict, settings: sandray.DaemonSettings, shard, out_dir: str) -> None:
    """One rank (or trial): read every view, record its videos, digests and the node's tasks."""
    with sandray.task(config, shard=shard, settings=settings) as view:
        epochs, digests = [], []
        for epoch in range(view.epochs):
            videos = []
            for iteration in range(view.iterations_per_epoch):
                path = view.path(epoch, iteration)
                with open(path, "rb") as f:
                    digests.append(hashlib.sha256(f.read()).hexdigest())
                meta = json.loads(os.getxattr(path, "user.sand.meta"))
                videos += [s["video"] for s in meta["samples"]]
            epochs.append(videos)
        with open(os.path.join(view.mountpoint, ".sand", "status.json"), "rb") as f:
            tasks_seen = sorted(json.loads(f.read())["tasks"])
        record = {"task": view.task, "node": ray.get_runtime_context().get_node_id(),
                  "epochs": epochs, "digests": digests, "tasks_seen": tasks_seen}
    with open(os.path.join(out_dir, f"{record['task']}.json"), "w") as f:
        json.dump(record, f)


def train_loop(loop_config: dict) -> None:
    read_rank(loop_config["task"], loop_config["settings"], "auto", loop_config["out"])


def records_in(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


@pytest.mark.slow
def test_train_ranks_cover_each_epoch_once_and_each_node_plans_its_own(cluster, dataset_dir):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    config = task_config(dataset_dir, task="ddp", epochs=2, sampling={"videos_per_batch": 2})
    settings = settings_in(cluster, "train")
    out = cluster / "train-out"
    out.mkdir()
    trainer = TorchTrainer(
        train_loop, train_loop_config={"task": config, "settings": settings, "out": str(out)},
        scaling_config=ScalingConfig(num_workers=WORLD_SIZE, placement_strategy="SPREAD"),
        run_config=RunConfig(storage_path=str(cluster / "train-results"), name="ddp"))
    trainer.fit()
    records = records_in(out)
    assert sorted(records) == [f"ddp.r{r}" for r in range(WORLD_SIZE)]
    all_videos = {n for r in records.values() for e in r["epochs"] for n in e}
    assert len(all_videos) == 12
    for epoch in range(2):
        read = [v for r in records.values() for v in r["epochs"][epoch]]
        assert sorted(read) == sorted(all_videos)  # every video once: covering and disjoint
    nodes: dict[str, set[str]] = {}
    for task, record in records.items():
        nodes.setdefault(record["node"], set()).add(task)
    assert len(nodes) == 2  # SPREAD: two ranks on each node
    for record in records.values():  # a node's mount holds only the ranks running on it
        assert set(record["tasks_seen"]) <= nodes[record["node"]]
    assert all(not s.get("tasks") for s in sandray.node_status().values())  # all ended
    assert sandray.stop_daemons() == 2
    assert mounts_under(cluster) == []

    # a second run, other mounts, explicit shards in plain Ray tasks: the same bytes
    again = cluster / "again-out"
    again.mkdir()
    remote_rank = ray.remote(num_cpus=0.5)(read_rank)
    ray.get([remote_rank.remote(config, settings_in(cluster, "again"), Shard(WORLD_SIZE, r),
                                str(again)) for r in range(WORLD_SIZE)])
    for task, record in records_in(again).items():
        assert record["digests"] == records[task]["digests"], task
    assert sandray.stop_daemons() == 2


def test_daemons_are_one_per_node_and_a_killed_trial_ends_its_task(cluster, dataset_dir):
    settings = settings_in(cluster, "kill")
    first = sandray.ensure_daemons(settings)
    again = sandray.ensure_daemons(settings)
    assert len(first) == 2
    assert {k: a._actor_id for k, a in first.items()} == {k: a._actor_id for k, a in again.items()}

    @ray.remote(num_cpus=0)
    class Trial:
        def hold(self, config: dict, name: str) -> tuple[int, str]:
            self.block = sandray.task(config, name=name, settings=settings)
            view = self.block.__enter__()
            return os.getpid(), view.mountpoint

    config = task_config(dataset_dir, task="x", epochs=1)
    kept, killed = Trial.remote(), Trial.remote()
    ray.get(kept.hold.remote(config, "kept"))
    pid, mountpoint = ray.get(killed.hold.remote(config, "killed"))
    status_path = Path(mountpoint, ".sand", "status.json")
    assert "killed" in json.loads(status_path.read_bytes())["tasks"]
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    while "killed" in json.loads(status_path.read_bytes())["tasks"]:
        assert time.monotonic() - started < KILLED_TASK_GONE_SECONDS
        time.sleep(0.05)
    print(f"a SIGKILLed trial's task was gone after {time.monotonic() - started:.2f}s")
    tasks = {t for s in sandray.node_status().values() for t in s.get("tasks", {})}
    assert tasks == {"kept"}

    daemon_pids = [s["pid"] for s in sandray.node_status().values() if s]
    ray.kill(kept)
    assert sandray.stop_daemons() == 2
    assert sandray.daemons() == {}
    assert mounts_under(cluster / "kill") == []
    for daemon_pid in daemon_pids:
        assert not running(daemon_pid)


def test_a_new_daemon_actor_takes_over_a_killed_ones_mount(cluster, dataset_dir):
    settings = settings_in(cluster, "actor")

    @ray.remote(num_cpus=0)
    def register_once(config: dict) -> tuple[str, int]:
        with sandray.task(config, name="once", settings=settings) as view:
            return view.mountpoint, json.loads(Path(view.mountpoint, STATUS).read_bytes())["pid"]

    config = task_config(dataset_dir, task="x", epochs=1)
    mountpoint, first_pid = ray.get(register_once.remote(config))
    for daemon in sandray.daemons().values():
        ray.kill(daemon, no_restart=True)  # its sandfs child lives on, serving the mount
    again, second_pid = ray.get(register_once.remote(config))
    assert (again, second_pid != first_pid) == (mountpoint, True)
    assert not running(first_pid)  # exited before the new daemon used its cache dir
    assert sandray.stop_daemons() >= 1
    assert mounts_under(cluster / "actor") == []
