"""From scans to checked task plans: the plans a mount starts with, and a task that joins a live
mount. A plan that could never serve a batch is a UserError naming the task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sandfs.access import Owner, owner_of, owner_videos, privileged
from sandfs.config.schema import TaskConfig
from sandfs.config.settings import MountSettings
from sandfs.errors import UserError
from sandfs.faults import fault_point
from sandfs.media.datasets import DatasetKey, ScanBook
from sandfs.media.types import DatasetScan
from sandfs.plan.coordination import Coordination
from sandfs.plan.labels import read_labels
from sandfs.plan.mount import dataset_key, indexed_identity, other_paths, plan_tasks, scan_videos
from sandfs.plan.probeorder import reading_order
from sandfs.plan.task import TaskPlan


def build_plans(configs: Sequence[TaskConfig], scans: dict[DatasetKey, DatasetScan],
                k_epochs: int, coordination: Coordination | None = None) -> list[TaskPlan]:
    plans = plan_tasks(configs, scans, k_epochs=k_epochs, coordination=coordination)
    for cfg, plan in zip(configs, plans, strict=True):
        check_plan(cfg, plan)
    follow_reads(plans)
    return plans


def follow_reads(plans: Sequence[TaskPlan]) -> None:
    """A lazy scan probes on in the order the tasks' first windows wait for their videos
    (`probeorder`: the tasks in turn), ahead of the readers; what a window's planning waits
    for goes before it."""
    for plan in plans:
        plan.probes.follow(reading_order(plan))


def check_plan(cfg: TaskConfig, plan: TaskPlan) -> None:
    if not plan.videos or plan.found_unusable():
        raise UserError(f"{cfg.source_path}: task {cfg.task}: no usable videos in "
                        f"{cfg.dataset.video_dataset_path} (see the log for files left out)")
    if plan.iterations_per_epoch == 0:
        raise UserError(
            f"{cfg.source_path}: task {cfg.task}: {len(plan.videos)} usable videos are fewer "
            f"than videos_per_batch={cfg.dataset.sampling.videos_per_batch} with drop_last: "
            f"an epoch would be empty")


def plan_new_task(settings: MountSettings, scans: ScanBook, coordination: Coordination,
                  cfg: TaskConfig, leaders: Mapping[tuple, int]) -> TaskPlan:
    """In a worker thread: scan the task's dataset if it is new, and plan it with the others,
    its epoch 0 where the leading task on its dataset stands (`leaders`: mount epoch by
    dataset identity key; a dataset no task reads yet starts at 0). Its labels file is read
    before anything else, once (docs/deploy.md#what-the-daemon-opens)."""
    owner = owner_of(cfg)
    labels = cfg.dataset.labels
    # read before the scan, through one checked descriptor: never reopened by path
    labels_data = None if labels in ("dirname", "none") else read_labels(
        labels, owner, settings.media_limits.max_labels_bytes)

    def in_use() -> set[DatasetKey]:
        return {dataset_key(c) for c in coordination.task_configs()}

    with scans.held(dataset_key(cfg), owner.uid, in_use, privileged(owner.uid)) as found:
        return _plan_joining(settings, coordination, cfg, leaders, found, owner, labels_data)


def _plan_joining(settings: MountSettings, coordination: Coordination, cfg: TaskConfig,
                  leaders: Mapping[tuple, int], found: DatasetScan, owner: Owner,
                  labels_data: bytes | None) -> TaskPlan:
    fault_point("plan_task")
    listed, probes = scan_videos(found)
    videos, refused = owner_videos(cfg, owner, listed)
    identity = (indexed_identity(cfg, found, videos)
                or coordination.identity(cfg.dataset.tag, videos))
    coordination.join(cfg, leaders.get(identity.key, 0))
    try:
        plan = TaskPlan(cfg, videos, k_epochs=settings.k_epochs,
                        other_rel_paths=other_paths(found, videos), coordination=coordination,
                        identity=identity, refused=refused, labels_data=labels_data,
                        probes=probes)
        check_plan(cfg, plan)
    except Exception:  # a refused task leaves nothing in the coordination but its checkpoint
        coordination.withdraw(cfg.task)
        raise
    return plan
