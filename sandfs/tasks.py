"""The task registry: the tasks of a mount, their owners and YAML texts, why a registration was
refused, how often each name was registered, and the checkpoint of what their coordination
froze."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence

import trio

from sandfs.access import Owner, owner_may_read, owner_of, privileged
from sandfs.bounds import LimitReached, Quota
from sandfs.config.limits import DEFAULT_LIMITS, Limits
from sandfs.config.schema import TaskConfig
from sandfs.config.settings import ENGINE_FIELDS
from sandfs.errors import UserError
from sandfs.plan.coordination import Coordination
from sandfs.plan.task import TaskPlan
from sandfs.sched.windows import Position
from sandfs.status import Failure
from sandfs.threads import limiter

log = logging.getLogger(__name__)


def ignored_engine_note(cfg: TaskConfig) -> str | None:
    """The warning for a task added to a live mount that sets `engine:` keys: the mount's engine
    (cache, workers, window size) is shared by all its tasks and fixed when it was mounted, so
    a later task's engine settings are ignored rather than refused (the same file can both
    start a mount and join one)."""
    given = [key for key, name in ENGINE_FIELDS.items() if name in cfg.engine_given]
    if not given:
        return None
    return (f"engine: settings of a task added to a live mount are ignored: {', '.join(given)} "
            f"of task {cfg.task} (the mount's own are kept)")


MOUNT_GENERATION = 0  # the registration count of a mount config's task (the first one)
# Refusals kept per writer uid for status.json (the latest): each refused name would otherwise
# stay for good, and a user can make refused names without end (about 2,000 a second).
ERRORS_PER_UID = 64

# (file name, text, writer's (uid, gid)) -> the config, checked against the mount, or raises
Admit = Callable[[str, str, tuple[int, int]], TaskConfig]


class TaskRegistry:
    def __init__(self, plans: Sequence[TaskPlan], *, task_texts: dict[str, str] | None = None,
                 checkpoint: Callable[[dict], None] | None = None,
                 task_planner: Callable[[TaskConfig, dict[tuple, int]], TaskPlan] | None = None,
                 admit: Admit | None = None, limits: Limits = DEFAULT_LIMITS) -> None:
        self.tasks = {p.name: p for p in plans}
        self.task_texts = task_texts or {}
        self.task_errors: dict[str, str] = {}  # why a registration was refused, by task name
        self.error_writers: dict[str, int] = {}  # uid whose task file each error answers
        self.owners: dict[str, Owner] = {p.name: owner_of(p.cfg) for p in plans}
        self.generations = dict.fromkeys(self.tasks, MOUNT_GENERATION)  # registrations by name
        self.checkpoint = checkpoint
        self.task_planner = task_planner  # plans a task registered on the live mount
        self.admit = admit  # loads and checks a task file (`registration.admit_upload`)
        self.limits = limits
        self.registering = Quota("registrations being planned", limits.registrations_per_uid,
                                 per_uid_errno=errno.EAGAIN, setting="registrations")
        self.checkpoint_failure: str | None = None  # written by the planning thread only
        # tasks planned and not in the scheduler's book yet, by name: their registrar, whose
        # registration quota they hold (`register` to `joined` or `withdraw`)
        self.joining: dict[str, int] = {}

    def window_planned(self) -> None:
        """In a worker thread, after a window was planned: checkpoint what coordination froze."""
        if self.tasks:
            self.save_state(next(iter(self.tasks.values())).coordination)

    def ended(self, plan: TaskPlan) -> None:
        """In a worker thread, once an ended task's views are released: the windows frozen that
        no task left may read are forgotten, and the checkpoint follows (plan-state.json)."""
        plan.coordination.forget_unreached(plan.k_epochs)
        self.save_state(plan.coordination)

    def save_state(self, coordination: Coordination) -> None:
        if self.checkpoint is not None and coordination.changed:
            try:
                self.checkpoint(coordination.state())
                self.checkpoint_failure = None
            except OSError as exc:  # out of fds or disk: the mount serves on, unsaved
                if self.checkpoint_failure is None:
                    log.warning("saving the plan checkpoint failed: %s", exc)
                self.checkpoint_failure = f"not saved: {exc}"

    def state_failures(self) -> tuple[Failure, ...]:
        """status.json's entry for a checkpoint that could not be saved (root's to see)."""
        reason = self.checkpoint_failure
        return () if reason is None else (Failure("", "plan-state.json", reason, 1),)

    async def load_file(self, file_name: str, text: str, writer: tuple[int, int]) -> TaskConfig:
        """A YAML written to .sand/tasks/NAME.yaml by `writer` (uid, gid), loaded and checked
        in a worker thread (`admit`)."""
        if self.admit is None or self.task_planner is None:
            raise UserError("this mount does not take new tasks")
        return await trio.to_thread.run_sync(self.admit, file_name, text, writer,
                                             limiter=limiter("task_files"))

    def refused(self, name: str, reason: str, writer_uid: int) -> None:
        """A task file written by `writer_uid` was refused: status.json tells them why (their
        latest ERRORS_PER_UID refusals)."""
        self.task_errors.pop(name, None)  # re-inserted: the latest goes last
        self.task_errors[name] = reason
        self.error_writers[name] = writer_uid
        theirs = [n for n in self.task_errors if self.error_writers.get(n) == writer_uid]
        for old in theirs[:-ERRORS_PER_UID]:
            del self.task_errors[old], self.error_writers[old]

    def may_read(self, name: str, video: int) -> bool:
        """May the task's owner still read this video of it directly?"""
        plan = self.tasks[name]
        return owner_may_read(plan.cfg, self.owners[name], plan.listed[video])

    def visible(self, uid: int) -> tuple[set[str], set[str]]:
        """(tasks, task errors) that `uid` may see in status.json: its own, or all for root and
        the daemon's user."""
        if privileged(uid):
            return set(self.tasks), set(self.task_errors)
        return ({name for name, owner in self.owners.items() if owner.uid == uid},
                {name for name, by in self.error_writers.items() if by == uid})

    async def register(self, cfg: TaskConfig, position: Callable[[str], Position]) -> TaskPlan:
        """Plan a task joining the live mount, its epoch 0 where the leading task on its
        dataset stands (`leading_epochs`). Its name stays taken, and its registrar's quota
        held, until the scheduler's book takes the plan (`joined`) or it is refused
        (`withdraw`): it is one of `tasks` from the moment the scheduler knows it, never
        before, so that where it stands and what is ready read one source."""
        if cfg.task in self.tasks or cfg.task in self.joining:
            raise UserError(f"task {cfg.task} is already registered on this mount")
        if self.task_planner is None:
            raise UserError("this mount does not take new tasks")
        owner = owner_of(cfg)
        registrar = owner.uid if cfg.access.registrar is None else cfg.access.registrar
        self.check_room(owner.uid, registrar)
        leaders = self.leading_epochs(cfg, position)
        self.registering.take(registrar)
        self.joining[cfg.task] = registrar
        try:
            return await trio.to_thread.run_sync(self.task_planner, cfg, leaders,
                                                 limiter=limiter("registration"))
        except BaseException as exc:
            self.withdraw(cfg.task)
            if isinstance(exc, UserError) or not isinstance(exc, Exception):
                raise  # a refusal with its reason, or cancelled
            raise refusal(cfg.task, exc) from exc  # e.g. an unreadable labels file

    def joined(self, plan: TaskPlan, text: str) -> None:
        """The scheduler's book took a registered plan (on the trio thread, as it did): the
        task is served from now on."""
        name = plan.name
        self.registering.give(self.joining.pop(name))
        self.tasks[name] = plan
        self.owners[name] = owner_of(plan.cfg)
        self.generations[name] = self.generations.get(name, -1) + 1
        self.task_texts[name] = text
        self.task_errors.pop(name, None)
        self.error_writers.pop(name, None)

    def withdraw(self, name: str) -> None:
        """A registration refused before the scheduler took its plan: its name and quota go
        back."""
        registrar = self.joining.pop(name, None)
        if registrar is not None:
            self.registering.give(registrar)

    def check_room(self, owner: int, registrar: int) -> None:
        """LimitReached past `tasks_total`, or, for a registrar other than root and the
        daemon's user, past `tasks_per_uid` tasks of `owner` (those being planned count)."""
        limits = self.limits
        if len(self.tasks) + sum(self.registering.held.values()) >= limits.tasks_total:
            raise LimitReached(errno.ENOSPC, f"the mount holds its limit of "
                                             f"{limits.tasks_total} tasks (tasks_total)")
        if privileged(registrar):
            return
        owned = sum(o.uid == owner for o in self.owners.values()) + self.registering.held[owner]
        if owned >= limits.tasks_per_uid:
            raise LimitReached(errno.EDQUOT, f"uid {owner} holds its limit of "
                                             f"{limits.tasks_per_uid} tasks (tasks_per_uid)")

    def leading_epochs(self, cfg: TaskConfig, position: Callable[[str], Position]
                       ) -> dict[tuple, int]:
        """Where the leading task on each dataset stands, in mount epochs, by dataset identity
        (`DatasetIdentity.key`: tag and videos, wherever they live): a joining task starts its
        windows at its own dataset's, sharing the frame pools being drawn now. A rank of a
        data-parallel job (`sampling.shard`) gets none, so always starts at 0: its clips must
        not depend on when it joined, or the ranks of one job would draw from different
        windows."""
        if cfg.dataset.sampling.shard is not None:
            return {}
        leaders: dict[tuple, int] = {}
        for name, plan in self.tasks.items():
            key, at = plan.identity.key, plan.epoch_offset + position(name).epoch
            leaders[key] = max(leaders.get(key, 0), at)
        return leaders

    def remove(self, name: str) -> TaskPlan:
        plan = self.tasks.pop(name)
        self.task_texts.pop(name, None)
        self.owners.pop(name, None)
        plan.coordination.remove(name)
        return plan


def refusal(task: str, exc: Exception) -> UserError:
    """A registration that failed for a reason other than the task's config."""
    return UserError(f"task {task} could not be planned: {type(exc).__name__}: {exc}")
