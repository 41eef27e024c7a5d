"""Algorithm 1 at dataset scale: the CPU seconds of `pruned_plans` over window 0 of the `small`
task with room for half its clips, in process (the figure `bench_scale.py --parts plan` calls
`prune_cpu_s`, without the rest of that part's planning and tracing).

The dataset is `bench_scale.py`'s (--sources short videos, scanned once, copied to --sizes
videos in memory; no links needed). One JSON record a size and repeat: `videos`, `clips`,
`prune_cpu_s`, `kept_clips`. To compare with an older commit, run this file from a worktree of
that commit: the sandfs beside it is the one imported.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale
from common import emit

from sandfs.config.loader import load_task_config
from sandfs.plan.mount import plan_tasks
from sandfs.plan.window import plan_window
from sandfs.sched.objects import leaves_nbytes
from sandfs.sched.pruning import pruned_plans


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--k-epochs", type=int, default=5)
    parser.add_argument("--sources", type=int, default=16, help="distinct videos scanned")
    parser.add_argument("--workers", type=int, default=2, help="probe workers for the scan")
    parser.add_argument("--work-dir", type=Path,
                        help="where the sources go (default: a temporary dir)")
    args = parser.parse_args()
    if min(args.sizes) < 1 or args.repeats < 1 or args.sources < 1:
        parser.error("--sizes, --repeats and --sources must be >= 1")
    return args


def prune_record(work_dir: Path, infos: list, videos: int, k_epochs: int) -> dict:
    root = work_dir / f"videos-{videos}"
    root.mkdir(exist_ok=True)  # named by the task's config; the scan is copied, not read
    scan = bench_scale.copied_scan(root, infos, videos)
    cfg = load_task_config(bench_scale.task_config("small", root, work_dir))
    plans = plan_tasks([cfg], {(cfg.dataset.video_dataset_path, cfg.dataset.extensions): scan},
                       k_epochs=k_epochs)
    window = plan_window(plans, 0)
    room = leaves_nbytes(window) // 2
    gc.collect()
    cpu = time.process_time()
    kept = pruned_plans(window, room)
    seconds = time.process_time() - cpu
    return {"record": "prune", "videos": videos,
            "clips": sum(len(work.uses) for work in window.videos.values()),
            "prune_cpu_s": round(seconds, 2),
            "kept_clips": sum(len(plan.clips) for plan in kept.values())}


def main() -> int:
    args = parse_args()
    with bench_scale.started("prune", args) as (work_dir, sources):
        infos = bench_scale.source_infos(sources, args)
        for videos in args.sizes:
            for _ in range(args.repeats):
                emit(prune_record(work_dir, infos, videos, args.k_epochs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
