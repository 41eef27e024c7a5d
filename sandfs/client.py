"""Registering a task on a live mount from Python, with or without a lease.

`register_task` validates a config the way `sandfs task add` does (errors name the file, line
and key), writes it to `MOUNT/.sand/tasks/NAME.yaml` (closing the file registers the task) and,
with `hold=True`, opens `MOUNT/.sand/tasks/NAME.lease`. The daemon ends a task when the last
handle on its lease is released, and the kernel releases it for us when the holder closes it,
exits or is killed (even with SIGKILL): a trial's task never outlives its process. Without a
lease (`hold=False`, or the CLI) the task lives until it is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from sandfs import reading
from sandfs.config.fields import plain
from sandfs.config.loader import BASE_DIR_MARK, load_task_config
from sandfs.config.schema import Shard, TaskConfig
from sandfs.config.yamlsafe import read_yaml
from sandfs.errors import UserError
from sandfs.plan.shard import rank_task_name
from sandfs.registration import upload_task

ConfigSource = str | os.PathLike[str] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TaskView:
    """Where a registered task's views are: `path(epoch, iteration)` is one batch, `read`
    reads it."""

    mountpoint: str
    task: str
    epochs: int
    iterations_per_epoch: int

    @property
    def root(self) -> str:
        return os.path.join(self.mountpoint, self.task)

    def path(self, epoch: int, iteration: int) -> str:
        if not (0 <= epoch < self.epochs and 0 <= iteration < self.iterations_per_epoch):
            raise IndexError(f"task {self.task} has {self.epochs} epochs of "
                             f"{self.iterations_per_epoch} iterations: no ({epoch}, {iteration})")
        return os.path.join(self.root, str(epoch), str(iteration), "view")

    def read(self, epoch: int, iteration: int) -> np.ndarray:
        """That batch as `np.load` gives it, read the cheaper way `sandfs.reading` reads."""
        return reading.read_view(self.path(epoch, iteration))


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """A validated config ready to be written to `.sand/tasks/` (anchored paths, final name)."""

    config: TaskConfig
    text: str  # starts with BASE_DIR_MARK so relative paths keep pointing where they did


class TaskHandle:
    """A registered task; closing it (or leaving its `with` block) ends the task."""

    def __init__(self, view: TaskView, lease_fd: int | None) -> None:
        self.view = view
        self._lease_fd = lease_fd
        self.closed = False

    @property
    def held(self) -> bool:
        return self._lease_fd is not None

    def close(self) -> None:
        """End the task now (unlink its YAML), then drop the lease. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            with contextlib.suppress(FileNotFoundError):  # already ended (removed, or unmounted)
                os.unlink(tasks_dir(self.view.mountpoint, f"{self.view.task}.yaml"))
        finally:
            if self._lease_fd is not None:
                os.close(self._lease_fd)
                self._lease_fd = None

    def __enter__(self) -> TaskHandle:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def tasks_dir(mountpoint: str, *names: str) -> str:
    return os.path.join(mountpoint, ".sand", "tasks", *names)


def prepare_task(config: ConfigSource, *, name: str | None = None,
                 shard: Shard | None = None) -> PreparedTask:
    """Validate `config` (a YAML path, YAML text — anything with a newline — or a mapping as
    YAML would load it); `name` replaces its `task:`, `shard` its `dataset.sampling.shard`, and
    a sharded task is named `NAME.rR`. Raises ConfigError (file:line:col) or UserError."""
    if isinstance(config, Mapping):
        data, base_dir, file = _plain(dict(config)), os.getcwd(), "<config>"
    else:
        text, file = _config_text(config)
        first = load_task_config(file, text=text, check_paths=False)  # errors on the user's lines
        data = _plain_yaml(text, file)
        base_dir = os.path.dirname(first.source_path)
        if text.startswith(BASE_DIR_MARK):
            base_dir = text.partition("\n")[0].removeprefix(BASE_DIR_MARK).strip()
    if name is not None:
        data["task"] = name
    if shard is not None:
        sampling = data.setdefault("dataset", {}).setdefault("sampling", {})
        sampling["shard"] = {"world_size": shard.world_size, "rank": shard.rank}
        data["task"] = rank_task_name(str(data.get("task")), shard)
    text = f"{BASE_DIR_MARK} {base_dir}\n" + yaml.safe_dump(data, sort_keys=False)
    cfg = load_task_config(os.path.join(base_dir, f"{data.get('task')}.yaml"), text=text)
    return PreparedTask(cfg, text)


def register_task(mountpoint: str | os.PathLike[str], config: ConfigSource | PreparedTask, *,
                  name: str | None = None, shard: Shard | None = None,
                  hold: bool = True) -> TaskHandle:
    """Register a task on the live mount at `mountpoint` (see `prepare_task` for `config`).
    With `hold` the task ends when this process lets go of it, however it ends."""
    mount = os.path.abspath(mountpoint)
    prepared = config if isinstance(config, PreparedTask) else prepare_task(
        config, name=name, shard=shard)
    read_status(mount)  # a clear error when it is not a live sandfs mount
    upload_task(mount, prepared.config.task, prepared.text, os.getcwd(), read_status)
    return attach(mount, prepared.config, hold=hold)


def attach(mountpoint: str, cfg: TaskConfig, *, hold: bool) -> TaskHandle:
    """A handle on task `cfg.task`, already registered on `mountpoint`; with `hold` its lease."""
    lease = None
    if hold:
        lease = os.open(tasks_dir(mountpoint, f"{cfg.task}.lease"), os.O_RDONLY | os.O_CLOEXEC)
    try:
        iterations = len(os.listdir(os.path.join(mountpoint, cfg.task, "0")))
    except OSError:
        if lease is not None:
            os.close(lease)
        raise
    return TaskHandle(TaskView(mountpoint, cfg.task, cfg.epochs, iterations), lease)


def read_status(mountpoint: str) -> dict:
    try:
        with open(os.path.join(mountpoint, ".sand", "status.json"), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise UserError(f"{mountpoint} is not a live sandfs mount ({exc})") from exc


def _config_text(config: str | os.PathLike[str]) -> tuple[str, str]:
    if isinstance(config, str) and "\n" in config:
        return config, os.path.join(os.getcwd(), "<config>")
    path = os.path.abspath(config)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as exc:
        raise UserError(f"cannot read config {path}: {exc.strerror}") from exc


def _plain_yaml(text: str, file: str) -> dict:
    return plain(read_yaml(text, file))


def _plain(data: Any) -> Any:
    """A mapping as YAML would give it (tuples -> lists), so it dumps as plain YAML."""
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    return data
