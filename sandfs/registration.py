"""Whether a task may join a mount: the checks every way in runs, in one place.

A task comes in five ways: `sandfs mount --config`, `sandfs task add`, a YAML written to
`.sand/tasks/`, `sandfs.client.register_task` and `sandfs.ray.task`. The last three write the
YAML to `.sand/tasks/` (so does `task add`), where the daemon loads it with `load_upload`;
`sandfs mount` (and a Ray node's first task) loads its configs with `load_mount_configs`. Both
then call `check_task` against the mount's settings before anything is planned, scanned or
shown, so the same config is refused for the same one-line reason whichever way it came.

This module sits with the FUSE layer (it checks the mount's layout); the daemon hands
`admit_upload`, bound to its settings, down to the task registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import replace

from sandfs.access import check_owner_paths, owner_of, stamped
from sandfs.config.loader import BASE_DIR_MARK, load_task_config, load_task_configs
from sandfs.config.schema import TaskConfig
from sandfs.config.settings import MountSettings, check_views_fit
from sandfs.errors import UserError
from sandfs.fuse.layout import check_layout
from sandfs.remote.options import is_remote_url


def load_mount_configs(paths: Iterable[str | os.PathLike[str]]) -> list[TaskConfig]:
    """The configs given to `sandfs mount`: their owner is the daemon's user (or `access:`)."""
    return load_task_configs(paths, before_paths=owned)


def load_upload(file_name: str, text: str, writer: tuple[int, int],
                config_dir: str, mountpoint: str = "") -> TaskConfig:
    """A YAML written to MOUNTPOINT/.sand/tasks/NAME.yaml by the FUSE request of `writer`
    (uid, gid), whom the task belongs to unless its `access:` says otherwise; parsed once.
    Relative paths in it are resolved against the folder named by a first line
    `# sandfs-base-dir: DIR` (`sandfs task add` writes it; errors then name DIR/NAME.yaml),
    else against `config_dir` (the mount's first config's; errors name the file written)."""

    def named_and_owned(cfg: TaskConfig) -> TaskConfig:
        if f"{cfg.task}.yaml" != file_name:
            raise UserError(f"{file_name}: the file must be named after its task: "
                            f"{cfg.task}.yaml")
        return owned(cfg, writer)

    return load_task_config(os.path.join(config_dir, file_name), text=text,
                            before_paths=named_and_owned,
                            shown_as=os.path.join(mountpoint, ".sand", "tasks", file_name))


def admit_upload(file_name: str, text: str, writer: tuple[int, int], *, config_dir: str,
                 settings: MountSettings) -> TaskConfig:
    """A YAML written to .sand/tasks/ (`load_upload`), checked against the live mount."""
    cfg = load_upload(file_name, text, writer, config_dir, settings.mountpoint)
    check_task(cfg, settings, live=True)
    return cfg


def owned(cfg: TaskConfig, registrar: tuple[int, int] | None = None) -> TaskConfig:
    """`cfg` stamped with who registered it, once its owner may reach its paths: checked
    before the daemon looks at them, since whether they exist is the owner's to know only."""
    if registrar is not None:
        cfg = replace(cfg, access=stamped(cfg.access, *registrar))
    check_owner_paths(cfg, owner_of(cfg))
    return cfg


def check_task(cfg: TaskConfig, settings: MountSettings, *, live: bool) -> None:
    """What a task is refused for against the mount it joins (its file's own checks are the
    loader's): a view that does not fit memory_limit, a dataset where the mount would wait on
    itself, and, on a live mount (`live`), a remote dataset. Raises UserError, one line."""
    check_views_fit(cfg, settings)
    where, dataset = f"{cfg.source_path}: task {cfg.task}", cfg.dataset.video_dataset_path
    try:
        check_layout(settings.mountpoint, settings.cache_dir, [dataset])
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    if live and is_remote_url(dataset):
        raise UserError(f"{where}: a task added to a live mount reads a local dataset; give "
                        f"remote datasets ({dataset}) to sandfs mount")


def upload_task(mountpoint: str, task: str, text: str, base_dir: str,
                read_status: Callable[[str], dict]) -> None:
    """Write `text` to `mountpoint`/.sand/tasks/TASK.yaml, its relative paths anchored at
    `base_dir` (the user's config's folder): closing it registers the task, the daemon having
    run `admit_upload`. A refusal is a UserError with the daemon's reason (status.json's
    task_errors, read with `read_status`)."""
    if not text.startswith(BASE_DIR_MARK):
        text = f"{BASE_DIR_MARK} {base_dir}\n{text}"
    try:
        with open(os.path.join(mountpoint, ".sand", "tasks", f"{task}.yaml"), "x",
                  encoding="utf-8") as f:
            f.write(text)
    except FileExistsError as exc:
        raise UserError(f"task {task} is already registered on {mountpoint}") from exc
    except OSError as exc:
        reason = read_status(mountpoint).get("task_errors", {}).get(task) or exc.strerror
        raise UserError(f"the daemon at {mountpoint} refused task {task}: {reason}") from exc
