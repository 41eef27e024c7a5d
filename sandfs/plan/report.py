"""What a merged plan does, as figures (pure): decode and augmentation work with sharing versus
the same tasks run independently, and how many objects the tasks share. `sandfs plan` prints
this (`format_plan`); benchmarks/bench_planning.py measures it over many epochs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from sandfs import ops as oplib
from sandfs.media.gop import frames_to_decode
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import WindowPlan, plan_window


def window_report(window: WindowPlan) -> dict:
    """Figures for one k-epoch window: one decode pass per video; an augmented frame (a frame
    after the same op instances) computed once however many clips use it."""
    figures: Counter[str] = Counter()
    frame_tasks: dict[tuple[str, int], set[str]] = defaultdict(set)
    for path, work in window.videos.items():
        figures["frames_decoded"] += frames_to_decode(work.info, sorted(work.frames))
        unique_aug, unique_crops = set(), set()
        seen_clips = set()
        for use in work.uses:
            readers = len(use.readers)
            clip = use.clip
            figures["clips"] += readers
            key = (use.view, clip.video_index, clip.sample)
            if key not in seen_clips:  # the streams of one clip share their decode
                seen_clips.add(key)
                figures["frames_decoded_independent"] += readers * frames_to_decode(
                    work.info, sorted(set(clip.frame_indices)))
            for index in clip.frame_indices:
                for task, _ in use.readers:
                    frame_tasks[(path, index)].add(task)
                for depth, op in enumerate(clip.ops):
                    figures["aug_ops_independent"] += readers
                    unique_aug.add((index, clip.source, clip.ops[: depth + 1]))
                    if op.name in oplib.CROP_OPS:
                        figures["crop_ops_independent"] += readers
                        unique_crops.add((index, clip.source, clip.ops[: depth + 1]))
        figures["aug_ops"] += len(unique_aug)
        figures["crop_ops"] += len(unique_crops)
    figures["frames_needed"] = len(frame_tasks)
    sharing = Counter(len(tasks) for tasks in frame_tasks.values())
    view_sharing = Counter(len(readers) for readers in window.readers.values())
    return {
        **figures,
        "views": len(window.views),
        "view_reads": sum(len(r) for r in window.readers.values()),
        "frames_by_task_count": dict(sorted(sharing.items())),
        "views_by_task_count": dict(sorted(view_sharing.items())),
    }


def plan_report(plans: Sequence[TaskPlan], epochs: int | None = None) -> dict:
    """Per window and in total, over the windows of the first `epochs` epochs (default: one
    window); `epochs` in the report is how many epochs those windows cover."""
    k = plans[0].k_epochs
    # never more than the longest task has: a 2-epoch task is planned over 2 epochs, not k
    epochs = min(epochs or k, max(p.epochs for p in plans))
    windows = []
    first = min(p.window_of(0) for p in plans)
    last = max(p.window_of(min(epochs, p.epochs) - 1) for p in plans)
    for window in range(first, last + 1):
        windows.append({"window": window, **window_report(plan_window(plans, window))})
    # whole windows are planned: the figures cover every epoch of them the tasks have
    epochs = max(sum(len(p.window_epochs(w)) for w in range(first, last + 1)) for p in plans)
    total: Counter[str] = Counter()
    for figures in windows:
        total.update({k: v for k, v in figures.items() if isinstance(v, int) and k != "window"})
    return {
        "tasks": {p.name: {"videos": len(p.videos), "iterations_per_epoch":
                           p.iterations_per_epoch, "frame_grid": p.coordination.pool(p.cfg, 0).grid,
                           "data_key": f"{p.data_key:032x}"[:12]} for p in plans},
        "k_epochs": k,
        "epochs": epochs,
        "windows": windows,
        "total": dict(total),
        "savings": savings(total),
    }


def savings(total: Counter[str]) -> dict:
    def cut(done: str, independent: str) -> float:
        return round(1 - total[done] / total[independent], 4) if total[independent] else 0.0

    return {"decode": cut("frames_decoded", "frames_decoded_independent"),
            "aug_ops": cut("aug_ops", "aug_ops_independent"),
            "crop_ops": cut("crop_ops", "crop_ops_independent")}


PLAN_FIGURES = (  # label, merged figure, independent figure, savings key
    ("frames decoded", "frames_decoded", "frames_decoded_independent", "decode"),
    ("augmentation ops", "aug_ops", "aug_ops_independent", "aug_ops"),
    ("crop ops", "crop_ops", "crop_ops_independent", "crop_ops"),
)


def format_plan(report: dict) -> str:
    """`plan_report`'s figures as `sandfs plan` prints them."""
    total, cut = report["total"], report["savings"]
    lines = [f"plan of {len(report['tasks'])} task(s) over {report['epochs']} "
             f"epoch{'s' * (report['epochs'] != 1)} "
             f"(k={report['k_epochs']}, {len(report['windows'])} window(s))"]
    for name, task in report["tasks"].items():
        lines.append(f"  task {name}: {task['videos']} videos, {task['iterations_per_epoch']} "
                     f"iterations/epoch, frame grid {task['frame_grid']}")
    for window in report["windows"]:
        lines.append(f"  window {window['window']}: " + ", ".join(
            f"{label} {window.get(done, 0):,} vs {window.get(independent, 0):,}"
            for label, done, independent, _ in PLAN_FIGURES))
    for label, done, independent, key in PLAN_FIGURES:
        lines.append(f"  {label}: {total.get(done, 0):,} vs {total.get(independent, 0):,} "
                     f"run independently ({-100 * cut[key]:+.1f}%)")
    by_tasks = {}
    for window in report["windows"]:
        for count, frames in window["frames_by_task_count"].items():
            by_tasks[count] = by_tasks.get(count, 0) + frames
    lines.append("  decoded frames used by " + ", ".join(
        f"{n} task(s): {frames:,}" for n, frames in sorted(by_tasks.items())))
    lines.append(f"  views: {total.get('views', 0):,} materialized for "
                 f"{total.get('view_reads', 0):,} reads (identical pipelines share views)")
    lines.append(FRAMES_NOTE)
    return "\n".join(lines)


# the scan knows the keyframes, not which frames are references: the decoder's skips are unknown
FRAMES_NOTE = ("  frames decoded are upper bounds, both sides: the decoder skips the "
               "non-reference frames no clip needs\n  (H.264/HEVC/MPEG-4), which a plan cannot "
               "count; a mount decodes at most as many")
