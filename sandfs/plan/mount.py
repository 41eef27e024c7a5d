"""Planning all the tasks of a mount together (SAND §5.2): one `Coordination` (shared frame
pools and crop windows, coordination.py) for every task plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sandfs.access import owner_of, owner_videos
from sandfs.config.schema import TaskConfig
from sandfs.media.probebook import ProbeBook
from sandfs.media.types import DatasetScan, ListedVideo, VideoInfo
from sandfs.plan.coordination import Coordination
from sandfs.plan.identity import DatasetIdentity
from sandfs.plan.task import TaskPlan


def dataset_key(cfg: TaskConfig) -> tuple[str, tuple[str, ...]]:
    """What a scan is keyed by: tasks with the same root and extensions share one scan."""
    return cfg.dataset.video_dataset_path, cfg.dataset.extensions


def other_paths(found: DatasetScan, videos: Sequence[ListedVideo] | Sequence[VideoInfo]
                ) -> list[str]:
    """The scan's files that a task given `videos` of it does not place (in no particular
    order; a path may repeat): its class names come from these too, so a task that may read
    only some videos still numbers its labels like the others. Not every file of the scan: a
    task's own videos' folders are split once, for their labels (250,000 paths split again
    took ~55 ms of each task's plan)."""
    listed = found.videos if found.listed is None else found.listed
    paths = [b.rel_path for b in found.bad]
    if videos is not listed:  # an owner may read some of them
        placed = {v.rel_path for v in videos}
        paths += [v.rel_path for v in listed if v.rel_path not in placed]
    return paths


def scan_videos(found: DatasetScan) -> tuple[Sequence[ListedVideo] | Sequence[VideoInfo],
                                             ProbeBook | None]:
    """What a plan places and its probe results: the listed files (docs/contract.md#lazy-scan),
    or a scan made by hand's usable videos."""
    if found.listed is None:
        return found.videos, None
    return found.listed, found.probes


def indexed_identity(cfg: TaskConfig, found: DatasetScan,
                     videos: Sequence[ListedVideo] | Sequence[VideoInfo]
                     ) -> DatasetIdentity | None:
    """The identity of `videos`, all the scan listed, as its scan index recorded it (None:
    not known, or the task's owner reads only some: computed, ~0.13 s of CPU at 250,000)."""
    if found.digest is None or videos is not found.listed:
        return None
    return DatasetIdentity(cfg.dataset.tag, found.digest, len(videos))


def mount_coordination(configs: Sequence[TaskConfig], frozen_state: dict | None = None, *,
                       coordinate: bool = True) -> Coordination:
    """What the tasks of a mount share, from the checkpoint of an earlier run if any."""
    coordination = Coordination(configs, coordinate=coordinate)
    if frozen_state is not None:
        coordination.load(frozen_state)
    return coordination


def plan_tasks(configs: Sequence[TaskConfig], scans: Mapping[tuple, DatasetScan], *,
               k_epochs: int, coordinate: bool = True,
               frozen_state: dict | None = None,
               coordination: Coordination | None = None) -> list[TaskPlan]:
    """The plans of all the tasks of a mount. `coordinate=False` plans each task on its own
    with fresh randomness per clip (for measuring what coordination saves and costs);
    `frozen_state`: the coordination checkpoint of an earlier run (same windows, same views);
    `coordination`: the mount's own, made beforehand (a mount without tasks has one too)."""
    if coordination is None:
        coordination = mount_coordination(configs, frozen_state, coordinate=coordinate)
    plans = []
    for cfg in configs:
        found = scans[dataset_key(cfg)]
        listed, probes = scan_videos(found)
        videos, refused = owner_videos(cfg, owner_of(cfg), listed)
        plans.append(TaskPlan(cfg, videos, k_epochs=k_epochs,
                              other_rel_paths=other_paths(found, videos),
                              identity=indexed_identity(cfg, found, videos),
                              coordination=coordination, refused=refused, probes=probes))
    return plans
