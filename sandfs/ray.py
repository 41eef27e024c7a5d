"""sandfs on a Ray cluster: one mount per node, run by a detached actor, and trials and
data-parallel ranks whose tasks live exactly as long as they do.

    with sandfs.ray.task(config, name="trial3") as view:      # in a Tune trial or Train worker
        for epoch in range(view.epochs):
            for it in range(view.iterations_per_epoch):
                batch = view.read(epoch, it)  # np.load(view.path(epoch, it)), cheaper

`task()` makes sure its node has a daemon and a mount, registers the task there and holds its
lease (see sandfs.client): leaving the block, an exception, ASHA stopping the trial or a SIGKILL
all end the task. In a Ray Train worker the task is rank `world_rank` of `world_size`
(`dataset.sampling.shard`), named `NAME.rR`, on the mount of the worker's own node.

The daemon of a node is a named, detached actor (`num_cpus=0`, pinned to its node) that runs
`sandfs mount --foreground` as a child process and stays. The mount starts with the first task
that reaches the node, whose `engine:` settings (k_epochs, workers, memory) become the mount's.
An actor that finds its node's mount served by a daemon it did not start (its predecessor was
killed) stops that daemon and mounts afresh. `stop_daemons()` unmounts and removes them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import ray
import ray.train
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sandfs.client import PreparedTask, TaskView, attach, prepare_task, register_task
from sandfs.config.schema import Shard
from sandfs.errors import UserError
from sandfs.launch import sandfs_argv, sandfs_env
from sandfs.pids import wait_for_exit
from sandfs.status import serves

ACTOR_PREFIX = "sandfs-daemon-"
@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """Where each node's daemon mounts. `{node}` in the paths becomes the start of the node's
    id, so several nodes on one machine (a local test cluster) get their own mounts."""

    mountpoint: str = "/tmp/sandfs-ray/{node}/mnt"
    cache_dir: str = "/tmp/sandfs-ray/{node}/cache"
    mount_args: tuple[str, ...] = ()  # more `sandfs mount` flags, e.g. ("--workers", "2")
    namespace: str = "sandfs"
    mount_timeout_s: float = 300.0

    def paths(self, node_id: str) -> tuple[str, str]:
        node = node_id[:12]
        return self.mountpoint.format(node=node), self.cache_dir.format(node=node)


@dataclass(frozen=True, slots=True)
class MountInfo:
    mountpoint: str
    started_with: str | None  # the task the mount was started with by this call, if any


class NodeDaemon:
    """The sandfs daemon of one node (a Ray actor): starts the mount and supervises it."""

    def __init__(self, settings: DaemonSettings, node_id: str) -> None:
        self.settings = settings
        self.node_id = node_id
        self.mountpoint, self.cache_dir = settings.paths(node_id)
        self.process: subprocess.Popen | None = None

    def serving(self) -> bool:
        """The views serve: this actor's daemon is alive and says so in the mount's
        status.json (it mounts first and answers there while it still scans)."""
        return (self.process is not None and self.process.poll() is None
                and serves(_status(self.mountpoint), self.process.pid))

    def ensure_mount(self, task: str, text: str) -> MountInfo:
        """The node's mount; started (or restarted, after a crash) with task `task` if down."""
        if self.serving():
            return MountInfo(self.mountpoint, None)
        self.stop()
        _end_orphan(self.mountpoint)
        first = os.path.join(f"{self.cache_dir}.tasks", f"{task}.yaml")
        os.makedirs(os.path.dirname(first), exist_ok=True)
        with open(first, "w", encoding="utf-8") as f:
            f.write(text)
        os.makedirs(self.mountpoint, exist_ok=True)
        argv = ["mount", self.mountpoint, "--foreground", "--cache-dir", self.cache_dir,
                "--config", first, *self.settings.mount_args]
        with open(f"{self.cache_dir}.log", "ab") as log:
            started_at = log.tell()  # where this start's lines begin
            self.process = subprocess.Popen(
                sandfs_argv(*argv), env=sandfs_env(), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_served(started_at)
        return MountInfo(self.mountpoint, task)

    def _wait_served(self, log_start: int) -> None:
        """Until the mount serves; a refused config is a UserError with `sandfs mount`'s
        one-line reason (the one every other way in gives), anything else a RuntimeError with
        the log's tail."""
        deadline = time.monotonic() + self.settings.mount_timeout_s
        while not self.serving():
            if self.process.poll() is not None or time.monotonic() > deadline:
                with open(f"{self.cache_dir}.log", "rb") as f:
                    f.seek(log_start)
                    tail = f.read().decode(errors="replace")[-2000:]
                exited = self.process.poll() is not None
                self.stop()
                reason = next((line.removeprefix("sandfs: ") for line in
                               reversed(tail.splitlines()) if line.startswith("sandfs: ")), None)
                if exited and reason:
                    raise UserError(reason)
                raise RuntimeError(f"sandfs did not mount {self.mountpoint} on node "
                                   f"{self.node_id}:\n{tail}")
            time.sleep(0.05)

    def status(self) -> dict:
        """The mount's status.json ({} when it is not mounted)."""
        return _status(self.mountpoint) if self.serving() else {}

    def where(self) -> tuple[str, str]:
        return self.node_id, self.mountpoint

    def stop(self) -> None:
        """Unmount cleanly (the daemon exits 0); kill it if it does not."""
        process, self.process = self.process, None
        if _is_mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", self.mountpoint], capture_output=True)
        if process is not None:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if _is_mounted(self.mountpoint):  # a dead daemon's stale mount
            subprocess.run(["fusermount3", "-uz", self.mountpoint], capture_output=True)


_NodeDaemonActor = ray.remote(NodeDaemon)


def _actor_for(node_id: str, settings: DaemonSettings):
    """The node's daemon actor: the existing one, or a new one pinned to the node."""
    return _NodeDaemonActor.options(
        name=ACTOR_PREFIX + node_id, namespace=settings.namespace, get_if_exists=True,
        lifetime="detached", num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(settings, node_id)


def ensure_daemons(settings: DaemonSettings = DaemonSettings()) -> dict[str, Any]:
    """One daemon actor per alive node (idempotent); returns them by node id."""
    daemons = {n["NodeID"]: _actor_for(n["NodeID"], settings) for n in ray.nodes() if n["Alive"]}
    ray.get([d.where.remote() for d in daemons.values()])  # each has started on its node
    return daemons


def daemon_names(namespace: str = "sandfs") -> list[str]:
    """The names of the daemon actors alive now."""
    return sorted(entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                  if entry["namespace"] == namespace and entry["name"].startswith(ACTOR_PREFIX))


def daemons(namespace: str = "sandfs") -> dict[str, Any]:
    """The daemon actors running now, by node id."""
    found = {}
    for name in daemon_names(namespace):
        with contextlib.suppress(ValueError):  # it died since it was listed
            found[name.removeprefix(ACTOR_PREFIX)] = ray.get_actor(name, namespace=namespace)
    return found


def node_status(namespace: str = "sandfs") -> dict[str, dict]:
    """Each node's status.json by node id ({} for a node whose mount has not started)."""
    found = daemons(namespace)
    return dict(zip(found, ray.get([d.status.remote() for d in found.values()]), strict=True))


def stop_daemons(namespace: str = "sandfs") -> int:
    """Unmount every node's mount and remove the daemon actors; returns how many there were."""
    found = daemons(namespace)
    try:
        ray.get([d.stop.remote() for d in found.values()], timeout=60)
    finally:
        for daemon in found.values():
            ray.kill(daemon, no_restart=True)
    deadline = time.monotonic() + 30
    while daemon_names(namespace) and time.monotonic() < deadline:  # a kill is asynchronous
        time.sleep(0.1)
    return len(found)


def train_shard() -> Shard | None:
    """This Ray Train worker's rank shard; None outside a Train worker (a Tune trial, a
    driver)."""
    try:
        context = ray.train.get_context()
        return Shard(context.get_world_size(), context.get_world_rank())
    except (RuntimeError, DeprecationWarning):  # a driver, a plain task, a Tune trial
        return None


@contextlib.contextmanager
def task(config: str | os.PathLike[str] | Mapping[str, Any], *, name: str | None = None,
         shard: Shard | str | None = "auto",
         settings: DaemonSettings = DaemonSettings()) -> Iterator[TaskView]:
    """Register `config` (a YAML path, YAML text or a mapping; `name` replaces its `task:`) on
    the mount of the node this process runs on, held by a lease; yields its view paths and ends
    the task on leaving. `shard="auto"` takes the Ray Train worker's rank (and names the task
    `NAME.rR`); pass a Shard or None to choose."""
    if shard == "auto":
        shard = train_shard()
    prepared = prepare_task(config, name=name, shard=shard)
    node_id = ray.get_runtime_context().get_node_id()
    daemon = _actor_for(node_id, settings)
    mount = ray.get(daemon.ensure_mount.remote(prepared.config.task, prepared.text))
    with _hold(mount, prepared) as handle:
        yield handle.view


def _hold(mount: MountInfo, prepared: PreparedTask):
    if mount.started_with == prepared.config.task:  # the mount's first task: registered
        return attach(mount.mountpoint, prepared.config, hold=True)
    return register_task(mount.mountpoint, prepared, hold=True)


def _end_orphan(mountpoint: str, timeout_s: float = 20.0) -> None:
    """A mount left by a daemon actor that was killed: its sandfs daemon still serves it. Ask it
    to unmount (SIGTERM is a clean stop) and wait until it has exited, not only unmounted: it
    still writes its cache dir after the unmount, and this actor's daemon is about to use it."""
    pid = _status(mountpoint).get("pid")
    if not pid:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    wait_for_exit(pid, time.monotonic() + timeout_s)  # unmounted first, or left a stale mount


def _status(mountpoint: str) -> dict:
    try:
        with open(os.path.join(mountpoint, ".sand", "status.json"), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return {}


def _is_mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return os.path.abspath(path) in (line.split()[4] for line in f)
