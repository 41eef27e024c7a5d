"""The task registry: the tasks of a mount, their YAML texts, why a registration was refused,
how often each name was registered, and the checkpoint of what their coordination froze."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import trio

from sandfs.config.loader import load_task_config
from sandfs.config.schema import TaskConfig
from sandfs.errors import UserError
from sandfs.plan.task import TaskPlan
from sandfs.sched.windows import Position


class TaskRegistry:
    def __init__(self, plans: Sequence[TaskPlan], *, task_texts: dict[str, str] | None = None,
                 checkpoint: Callable[[dict], None] | None = None,
                 task_planner: Callable[[TaskConfig, int], TaskPlan] | None = None,
                 config_dir: str = "/") -> None:
        self.tasks = {p.name: p for p in plans}
        self.task_texts = task_texts or {}
        self.task_errors: dict[str, str] = {}  # why a registration was refused, by task name
        self.generations = dict.fromkeys(self.tasks, 0)  # registrations of each task name
        self.checkpoint = checkpoint
        self.task_planner = task_planner  # plans a task registered on the live mount
        self.config_dir = config_dir  # where relative paths of such a task point from

    def window_planned(self) -> None:
        """In a worker thread, after a window was planned: checkpoint what coordination froze."""
        coordination = next(iter(self.tasks.values())).coordination if self.tasks else None
        if self.checkpoint is not None and coordination is not None and coordination.changed:
            self.checkpoint(coordination.state())

    def load_file(self, file_name: str, text: str) -> TaskConfig:
        """A YAML written to .sand/tasks/NAME.yaml. Relative paths in it are resolved against
        the folder named by a first line `# sandfs-base-dir: DIR` (`sandfs task add` writes
        it), else against the folder of the mount's first config."""
        cfg = load_task_config(os.path.join(self.config_dir, file_name), text=text)
        if f"{cfg.task}.yaml" != file_name:
            raise UserError(f"{file_name}: the file must be named after its task: "
                            f"{cfg.task}.yaml")
        return cfg

    async def register(self, cfg: TaskConfig, text: str,
                       position: Callable[[str], Position]) -> TaskPlan:
        """Plan a task joining the live mount, its epoch 0 where the leading task on its
        dataset stands (`mount_epoch`)."""
        if cfg.task in self.tasks:
            raise UserError(f"task {cfg.task} is already registered on this mount")
        if self.task_planner is None:
            raise UserError("this mount does not take new tasks")
        epoch = self.mount_epoch(cfg, position)
        try:
            plan = await trio.to_thread.run_sync(self.task_planner, cfg, epoch)
        except UserError:
            raise
        except Exception as exc:  # e.g. an unreadable labels file: refused, with the reason
            raise refusal(cfg.task, exc) from exc
        self.tasks[cfg.task] = plan
        self.generations[cfg.task] = self.generations.get(cfg.task, -1) + 1
        self.task_texts[cfg.task] = text
        self.task_errors.pop(cfg.task, None)
        return plan

    def mount_epoch(self, cfg: TaskConfig, position: Callable[[str], Position]) -> int:
        """Where the leading task on `cfg`'s dataset stands, in mount epochs (0: none): a
        joining task starts its windows there, sharing the frames being decoded now."""
        root = cfg.dataset.video_dataset_path
        return max((plan.epoch_offset + position(name).epoch
                    for name, plan in self.tasks.items()
                    if plan.cfg.dataset.video_dataset_path == root), default=0)

    def remove(self, name: str) -> TaskPlan:
        plan = self.tasks.pop(name)
        self.task_texts.pop(name, None)
        plan.coordination.remove(name)
        return plan


def refusal(task: str, exc: Exception) -> UserError:
    """A registration that failed for a reason other than the task's config."""
    return UserError(f"task {task} could not be planned: {type(exc).__name__}: {exc}")
