"""Algorithm 1 at dataset scale: the CPU seconds of `pruned_plans` over window 0 of the `small`
task with room for half its clips, in process (the figure `bench_scale.py --parts plan` calls
`prune_cpu_s`, without the rest of that part's planning and tracing).

The dataset is `bench_scale.py`'s (--sources short videos, scanned once, copied to --sizes
videos in memory; no links needed). One JSON record a size and repeat: `videos`, `clips`,
`prune_cpu_s`, `kept_clips`, and `prune_rss_peak_bytes` (the process's peak RSS while it
prunes, over its RSS before: Linux's peak reset by /proc/self/clear_refs). With --memory, a
second run under tracemalloc (numpy's arrays are traced): `prune_peak_bytes` over what was
held before, and `prune_peak_bytes_per_clip`. To compare with an older commit, run this file
from a worktree of that commit: the sandfs beside it is the one imported.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
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
    parser.add_argument("--memory", action="store_true",
                        help="prune again under tracemalloc: its peak bytes a clip")
    parser.add_argument("--work-dir", type=Path,
                        help="where the sources go (default: a temporary dir)")
    args = parser.parse_args()
    if min(args.sizes) < 1 or args.repeats < 1 or args.sources < 1:
        parser.error("--sizes, --repeats and --sources must be >= 1")
    return args


def prune_record(work_dir: Path, infos: list, videos: int, k_epochs: int,
                 memory: bool) -> dict:
    root = work_dir / f"videos-{videos}"
    root.mkdir(exist_ok=True)  # named by the task's config; the scan is copied, not read
    scan = bench_scale.copied_scan(root, infos, videos)
    cfg = load_task_config(bench_scale.task_config("small", root, work_dir))
    plans = plan_tasks([cfg], {(cfg.dataset.video_dataset_path, cfg.dataset.extensions): scan},
                       k_epochs=k_epochs)
    window = plan_window(plans, 0)
    room = leaves_nbytes(window) // 2
    gc.collect()
    before = _rss_peak_reset()
    cpu = time.process_time()
    kept = pruned_plans(window, room)
    seconds = time.process_time() - cpu
    clips = sum(len(work.uses) for work in window.videos.values())
    record = {"record": "prune", "videos": videos, "clips": clips,
              "prune_cpu_s": round(seconds, 2),
              "kept_clips": sum(len(plan.clips) for plan in kept.values()),
              "prune_rss_peak_bytes": _status_bytes("VmHWM") - before}
    if memory:
        del kept
        peak = traced_peak(lambda: pruned_plans(window, room))
        record.update(prune_peak_bytes=peak, prune_peak_bytes_per_clip=round(peak / clips, 1))
    return record


def traced_peak(run) -> int:
    """tracemalloc's peak while `run` runs, over what was traced before it."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _status_bytes(field: str) -> int:
    """A /proc/self/status field (kB) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _rss_peak_reset() -> int:
    """The RSS now, the kernel's peak RSS reset to it."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def main() -> int:
    args = parse_args()
    with bench_scale.started("prune", args) as (work_dir, sources):
        infos = bench_scale.source_infos(sources, args)
        for videos in args.sizes:
            for _ in range(args.repeats):
                emit(prune_record(work_dir, infos, videos, args.k_epochs, args.memory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
