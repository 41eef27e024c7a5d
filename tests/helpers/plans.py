"""Task plans built the way the daemon builds them, for tests that compare against a plan: from
a real scan of a dataset, or from made-up videos that need no files at all."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from sandfs.config.loader import load_task_config, load_task_configs
from sandfs.media.scan import scan_dataset
from sandfs.media.types import DatasetScan, VideoInfo
from sandfs.plan.mount import other_paths, plan_tasks, scan_videos
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config

FAKE_DATASET = Path("/nonexistent/sandfs-test-dataset")  # fixed: it seeds the plan's draws


def fake_videos(count: int, num_frames: int = 120, size=(64, 48)) -> list[VideoInfo]:
    """`count` videos in folders c0..c2 that exist only as metadata (nothing can decode them)."""
    width, height = size
    return [
        VideoInfo(name=f"c{i % 3}/v{i:03d}", rel_path=f"c{i % 3}/v{i:03d}.mp4",
                  path=f"/nowhere/c{i % 3}/v{i:03d}.mp4", size_bytes=1000, mtime_ns=0,
                  width=width, height=height, num_frames=num_frames,
                  frame_pts=tuple(range(num_frames)), time_base=Fraction(1, 25),
                  keyframe_indices=tuple(range(0, num_frames, 12)), seekable=True)
        for i in range(count)
    ]


def make_plan(tmp_path: Path, videos=None, k_epochs: int = 2, **overrides) -> TaskPlan:
    """A plan of `task_config` (with `overrides`) over made-up videos (default: 10)."""
    path = write_config(tmp_path / "t.yaml", task_config(FAKE_DATASET, **overrides))
    cfg = load_task_config(path, check_paths=False)
    return TaskPlan(cfg, videos if videos is not None else fake_videos(10), k_epochs=k_epochs)


def build_plan(config_path: Path, found: DatasetScan | None = None) -> TaskPlan:
    """The plan a mount of this one config serves (`found`: its dataset's scan, if made)."""
    cfg = load_task_config(config_path)
    if found is None:
        found = scan_dataset(cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    listed, probes = scan_videos(found)
    return TaskPlan(cfg, listed, k_epochs=cfg.engine.k_epochs,
                    other_rel_paths=other_paths(found, listed), probes=probes)


def build_plans(paths: Sequence[Path]) -> dict[str, TaskPlan]:
    """The plans a mount of these configs serves, by task name (planned together)."""
    configs = load_task_configs(paths)
    scans = {}
    for cfg in configs:
        key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
        scans.setdefault(key, scan_dataset(*key))
    return {p.name: p for p in plan_tasks(configs, scans, k_epochs=configs[0].engine.k_epochs)}


class PlanStore:
    """A store as `plan_active_window` asks of one: the objects it holds and its room."""

    def __init__(self, budget_bytes: int, keys: frozenset = frozenset()) -> None:
        self.budget_bytes, self.keys = budget_bytes, keys

    def __contains__(self, key) -> bool:
        return key in self.keys

    def object_count(self) -> int:
        return len(self.keys)


class SomeOnDisk:
    """A store holding every third clip it is asked about (and no frames)."""

    budget_bytes = 1 << 40

    def __init__(self) -> None:
        self.asked = 0
        self.held: set = set()

    def object_count(self) -> int:
        return 1

    def __contains__(self, key) -> bool:
        if key.kind != "clip":
            return False
        self.asked += 1
        if self.asked % 3 == 0:
            self.held.add(key)
        return key in self.held


def live_objects(kinds: Sequence[type]) -> dict[type, int]:
    """The live objects of each of `kinds`: the collector's, and those they hold (a tuple the
    collector untracked is still some container's)."""
    found: dict[type, set[int]] = {kind: set() for kind in kinds}
    for held_by in gc.get_objects():
        for thing in (held_by, *gc.get_referents(held_by)):
            if type(thing) in found:
                found[type(thing)].add(id(thing))
    return {kind: len(ids) for kind, ids in found.items()}
