"""Acceptance figures of the multi-task planner (SAND §7.4: Figures 16, 19 and 20).

A SlowFast-like and an MAE-like task (configs/planning/slowfast.yaml, mae.yaml: strides 2 and 4,
one and two clips per video, random crops of 224 after a short-side resize to 256, as the real
models train; `--mae-crop 160` gives the MAE-like task a smaller crop inside the shared window) are
planned over --epochs with k = --k-epochs, on a Kinetics-like dataset *description*: fake
VideoInfos, 340x256, 30 fps, 270..300 frames, a keyframe every --gops frames. Nothing is decoded
for these figures; "planned" is plan_tasks(coordinate=True), "independent" the same tasks with
coordinate=False.

- operations (Figure 16): frames decoded and random crops, planned (one decode pass per video
  and window, each distinct augmented frame once) vs independent execution (every clip of every
  task and epoch decoded on its own from the keyframe before it, every crop applied).
- reuse (Figure 19): for every frame some clip selects, how many clips (any task, any epoch)
  select it; the share selected 4+ times, the histogram, and reuse.png. Besides the two plans,
  `iid` draws every clip start uniformly on its own (fresh randomness per clip).
- planning_time: wall and CPU seconds to build the plans of every window (plan_tasks and
  plan_window), medians over --repeats, per 1000 videos.
- board: CPU seconds the event loop spends taking window 0 and 1 into the batch board
  (`BatchBoard.add_window`), ranking the jobs once (`UrgencyOrder.urgent`) and dropping window
  0, beside the planning thread's seconds for them (`work.plan_active_window`), medians over
  --repeats; and the bytes a clip the two windows' plans and the board hold once ranked
  (tracemalloc, what a daemon holds for them); with --store-share S, planned for a store
  with room for S of window 0's clips that holds none of them (one other object, so each
  clip's key is looked up, as on a warm mount; a daemon always has a store; at scale it holds
  a small share of a window).
- lead: CPU seconds of window 0's lead part (each task's first 4 batches' videos, with all
  their clips in the window: what a large window is planned from first), medians over
  --repeats.
- stop: seconds a planning thread takes to stop once told to (`plan.window.STOP_PLANNING`, as
  the daemon's shutdown tells it), asked --stop-after-s into window 0 (medians over --repeats),
  beside the seconds the whole window takes to plan.
- loss (Figure 20): a 4-class synthetic dataset of moving bars (class = bar orientation and a
  jittered hue) is written with PyAV; the tiny variants of the two tasks
  (configs/planning/*-tiny.yaml) build their batches with
  tests.helpers.reference.reference_array, and TinyVideoNet (scripts/train_demo.py) trains from
  the same init on the planned and on the independent batches; `independent_seed1` (another
  data seed) shows the run-to-run variation a gap should be compared with. loss.png.

One JSON object per line on stdout (a params record, then one per figure and a summary); a
readable summary on stderr.

    .venv/bin/python benchmarks/bench_planning.py --quick          # about a minute
    .venv/bin/python benchmarks/bench_planning.py --out-dir /tmp/sandfs-bench/planning
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import math
import os
import shutil
import sys
import threading
import time
import tracemalloc
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import yaml
from common import emit, fill_defaults, machine_info, summary

from sandfs.config.loader import load_task_config
from sandfs.config.schema import TaskConfig
from sandfs.media.scan import scan_dataset
from sandfs.media.types import DatasetScan, VideoInfo
from sandfs.plan.mount import plan_tasks
from sandfs.plan.report import plan_report
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import STOP_PLANNING, PlanningStopped, plan_window
from sandfs.sched import work
from sandfs.sched.board import BatchBoard
from sandfs.sched.objects import PRUNE_TARGET_FRACTION, leaves_nbytes
from sandfs.sched.parts import lead_part
from sandfs.sched.planning import LEAD_BATCHES
from tests.helpers import reference
from tests.helpers.plans import PlanStore

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "planning"
TASKS = ("slowfast", "mae")
FAKE_ROOT = "/nonexistent/kinetics-like"  # fixed: the dataset path seeds the shared frame pool
KINETICS_FPS = 30
KINETICS_FRAMES = (270, 300)
KINETICS_WH = (340, 256)
KINETICS_CLASSES = 400
REUSE_THRESHOLD = 4  # Figure 19's "selected four or more times"
PAPER = {"decode_cut": 0.503, "crop_cut": 0.331, "reuse_4plus_planned": 0.601,
         "reuse_4plus_independent": 0.106}
BARS_CLASSES = 4
BARS_VIDEOS_PER_CLASS = 12
BARS_FRAMES = 60
BARS_SIZE_PX = 96
BARS_GOP_FRAMES = 30
BARS_HUES = ((220, 60, 60), (60, 200, 60), (60, 80, 230), (220, 200, 40))  # RGB per class
LOSS_RUNS = (("planned", 0, True), ("independent", 0, False), ("independent_seed1", 1, False))
DEFAULTS = {"full": {"videos": 1000, "repeats": 3, "train_epochs": 15},
            "quick": {"videos": 100, "repeats": 1, "train_epochs": 3}}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="100 videos, 1 repeat, 3 training epochs (about a minute)")
    parser.add_argument("--videos", type=int, help="dataset size for the figures (default 1000)")
    parser.add_argument("--epochs", type=int, default=10, help="epochs planned per task")
    parser.add_argument("--k-epochs", type=int, default=5, help="epochs per planning window")
    parser.add_argument("--gops", type=int, nargs="+", default=[250, 30],
                        help="keyframe intervals in frames, one figure each (default 250 30)")
    parser.add_argument("--mae-crop", type=int, default=224,
                        help="the MAE-like task's random crop side (default 224, as SlowFast's)")
    parser.add_argument("--repeats", type=int, help="planning time repeats (default 3)")
    parser.add_argument("--train-epochs", type=int, help="loss experiment epochs (default 15)")
    parser.add_argument("--stop-after-s", type=float, default=1.0,
                        help="when planning is told to stop in the stop figure (default 1)")
    parser.add_argument("--store-share", type=float, default=0.0,
                        help="board figure: an empty store with room for this share of each "
                             "window's clips (default 0: no store)")
    parser.add_argument("--parts", nargs="+", choices=("figures", "timing", "board", "stop",
                                                            "lead", "loss"),
                        default=["figures", "timing", "loss"])
    parser.add_argument("--out-dir", type=Path, default=Path("/tmp/sandfs-bench/planning"),
                        help="where reuse.png, loss.png and the bars dataset go")
    args = parser.parse_args()
    fill_defaults(parser, args, DEFAULTS,
                  positive=("videos", "epochs", "k_epochs", "repeats", "train_epochs"))
    return args


# -- plans ------------------------------------------------------------------------------------


def task_configs(variant: str, root: str, epochs: int, seed: int = 0,
                 mae_crop: int | None = None) -> list[TaskConfig]:
    """The two tasks of configs/planning (`variant` "" or "-tiny") on `root`; `mae_crop`
    overrides the MAE-like task's random crop side."""
    configs = []
    for task in TASKS:
        path = CONFIG_DIR / f"{task}{variant}.yaml"
        config = yaml.safe_load(path.read_text())
        config["epochs"], config["seed"] = epochs, seed
        config["dataset"]["video_dataset_path"] = root
        if task == "mae" and mae_crop:
            for step in config["dataset"]["augmentation"]:
                for op in step.get("config", []):
                    if "random_crop" in op:
                        op["random_crop"]["size"] = [mae_crop, mae_crop]
        configs.append(load_task_config(path, text=yaml.safe_dump(config), check_paths=False))
    return configs


def kinetics_like_videos(count: int, gop_frames: int) -> tuple[VideoInfo, ...]:
    """Scan results as a Kinetics-400 subset would give them (seeded frame counts)."""
    frame_counts = np.random.default_rng(0).integers(KINETICS_FRAMES[0], KINETICS_FRAMES[1] + 1,
                                                     count)
    width, height = KINETICS_WH
    videos = []
    for i, num_frames in enumerate(frame_counts.tolist()):
        name = f"c{i % KINETICS_CLASSES:03d}/v{i:06d}"
        videos.append(VideoInfo(
            name=name, rel_path=f"{name}.mp4", path=f"{FAKE_ROOT}/{name}.mp4", size_bytes=1,
            mtime_ns=0, width=width, height=height, num_frames=num_frames,
            frame_pts=tuple(range(num_frames)), time_base=Fraction(1, KINETICS_FPS),
            keyframe_indices=tuple(range(0, num_frames, gop_frames)), seekable=True))
    return tuple(videos)


def plan_pair(configs: list[TaskConfig], scan: DatasetScan, k_epochs: int, *,
              coordinate: bool) -> list[TaskPlan]:
    scans = {(scan.root, configs[0].dataset.extensions): scan}
    return plan_tasks(configs, scans, k_epochs=k_epochs, coordinate=coordinate)


def fake_scan(videos: tuple[VideoInfo, ...]) -> DatasetScan:
    return DatasetScan(FAKE_ROOT, videos, ())


# -- Figure 16: operations --------------------------------------------------------------------


def cut(done: int, baseline: int) -> float:
    return round(1 - done / baseline, 4) if baseline else 0.0


def operations_record(planned: dict, independent: dict, gop_frames: int) -> dict:
    """planned/independent: plan_report totals of the coordinated and uncoordinated plans."""
    return {
        "record": "operations", "gop_frames": gop_frames,
        "frames_decoded": {"planned": planned["frames_decoded"],
                           "independent": independent["frames_decoded_independent"],
                           "window_pass_uncoordinated": independent["frames_decoded"]},
        "crop_ops": {"planned": planned["crop_ops"],
                     "independent": independent["crop_ops_independent"]},
        "aug_ops": {"planned": planned["aug_ops"],
                    "independent": independent["aug_ops_independent"]},
        "frames_needed": {"planned": planned["frames_needed"],
                          "uncoordinated": independent["frames_needed"]},
        "decode_cut": cut(planned["frames_decoded"], independent["frames_decoded_independent"]),
        "decode_cut_by_coordination": cut(planned["frames_decoded"],
                                          independent["frames_decoded"]),
        "crop_cut": cut(planned["crop_ops"], independent["crop_ops_independent"]),
        "aug_cut": cut(planned["aug_ops"], independent["aug_ops_independent"]),
        "clips": planned["clips"],
    }


# -- Figure 19: frame reuse -------------------------------------------------------------------


def selection_counts(plans: list[TaskPlan], epochs: int) -> np.ndarray:
    """(video, frame) -> how many clips of any task and epoch select the frame."""
    videos = plans[0].videos
    counts = np.zeros((len(videos), max(v.num_frames for v in videos)), dtype=np.int64)
    for plan in plans:
        for epoch in range(epochs):
            for iteration in range(plan.iterations_per_epoch):
                for clip in plan.view_plan(epoch, iteration).clips:
                    np.add.at(counts[clip.video_index], list(clip.frame_indices), 1)
    return counts


def iid_selection_counts(plans: list[TaskPlan], epochs: int) -> np.ndarray:
    """The same clips with every start drawn uniformly on its own (fresh randomness)."""
    videos, rng = plans[0].videos, np.random.default_rng(0)
    counts = np.zeros((len(videos), max(v.num_frames for v in videos)), dtype=np.int64)
    for plan in plans:
        sampling = plan.sampling
        offsets = np.arange(sampling.frames_per_video) * sampling.frame_stride
        draws = epochs * sampling.samples_per_video
        for index, info in enumerate(videos):
            starts = rng.integers(0, info.num_frames - plan.span_frames + 1, draws)
            np.add.at(counts[index], (starts[:, None] + offsets).ravel(), 1)
    return counts


def reuse_figures(counts: np.ndarray) -> dict:
    selected = counts[counts > 0]
    histogram = np.bincount(selected)
    return {"frames_selected": int(selected.size),
            "share_4plus": round(float(np.mean(selected >= REUSE_THRESHOLD)), 4),
            "mean_selections": round(float(selected.mean()), 3),
            "histogram": {int(n): int(f) for n, f in enumerate(histogram) if f}}


def plot_reuse(figures: dict[str, dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    # the uncoordinated plan and iid nearly coincide: distinct line styles keep both visible
    for (mode, fig_data), style in zip(figures.items(), ("-", "--", ":"), strict=False):
        times = np.array(sorted(fig_data["histogram"]))
        frames = np.array([fig_data["histogram"][t] for t in times])
        ax.step(times, np.cumsum(frames) / frames.sum(), where="post", linestyle=style,
                label=f"{mode} ({fig_data['share_4plus']:.1%} selected 4+)")
    ax.axvline(REUSE_THRESHOLD - 0.5, color="gray", linestyle=":")
    ax.set(xlabel="times a frame is selected (all tasks, all epochs)", ylabel="CDF of frames",
           title="Frame selection count (Figure 19)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def have_matplotlib() -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        return False
    return True


# -- planning time ----------------------------------------------------------------------------


def planning_seconds(configs: list[TaskConfig], scan: DatasetScan, args) -> tuple[float, float]:
    """Wall and CPU seconds to plan every window of args.epochs from scratch."""
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    plans = plan_pair(configs, scan, args.k_epochs, coordinate=True)
    for window in range(math.ceil(args.epochs / args.k_epochs)):
        plan_window(plans, window)
    return time.perf_counter() - started_wall, time.process_time() - started_cpu


def timing_record(args) -> dict:
    scan = fake_scan(kinetics_like_videos(args.videos, args.gops[0]))
    configs = task_configs("", FAKE_ROOT, args.epochs)
    planning_seconds(configs, fake_scan(scan.videos[:50]), args)  # warm-up, untimed
    runs = [planning_seconds(configs, scan, args) for _ in range(args.repeats)]
    wall, cpu = summary([w for w, _ in runs]), summary([c for _, c in runs])
    per_1000 = 1000 / args.videos
    clips = args.videos * args.epochs * sum(c.dataset.sampling.samples_per_video for c in configs)
    return {"record": "planning_time", "videos": args.videos, "epochs": args.epochs,
            "clips": clips, "wall_s": wall, "cpu_s": cpu,
            "cpu_us_per_clip": round(cpu["median"] / clips * 1e6, 1),
            "wall_s_per_1000_videos": round(wall["median"] * per_1000, 3),
            "cpu_s_per_1000_videos": round(cpu["median"] * per_1000, 3)}


def window_store(plans: list[TaskPlan], share: float) -> PlanStore | None:
    """A store with room for `share` of window 0's clips (None: no store), holding one object
    of no clip of the window: a warm store, so planning looks up each clip's key in it."""
    if not share:
        return None
    budget = int(leaves_nbytes(plan_window(plans, 0)) * share / PRUNE_TARGET_FRACTION)
    return PlanStore(budget, frozenset({"an object of another dataset"}))


def board_seconds(plans: list[TaskPlan], store: PlanStore | None) -> dict[str, float]:
    """CPU seconds of planning windows 0 and 1 (threads) and of the board taking them, ranking
    once and dropping window 0 (the event loop)."""
    cpu = time.process_time()
    planned = [work.plan_active_window(plans, w, store, "leaves") for w in (0, 1)]
    timed = {"planning_threads_s": time.process_time() - cpu}
    board = BatchBoard()
    for name, step in (("add_windows_s", lambda: [board.add_window(p) for p in planned]),
                       ("rank_s", lambda: board.urgency.urgent(board.pending, set())),
                       ("drop_window_s", lambda: board.drop_window(0, planned[0].plan.views))):
        gc.collect()  # not a collection of what planning left, whenever one comes
        cpu = time.process_time()
        step()
        timed[name] = time.process_time() - cpu
    clips = sum(len(v.uses) for p in planned for v in p.plan.videos.values())
    timed["plans_and_board_bytes_per_clip"] = held_bytes(plans, store) / clips
    return timed


def held_bytes(plans: list[TaskPlan], store: PlanStore | None) -> int:
    """What windows 0 and 1's plans and the board hold once ranked, as a daemon holds them
    (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    planned = [work.plan_active_window(plans, w, store, "leaves") for w in (0, 1)]
    board, held = BatchBoard(), [p.plan for p in planned]
    for window in planned:
        board.add_window(window)
    board.urgency.urgent(board.pending, set())
    del planned, window
    gc.collect()
    nbytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del board, held
    return nbytes


def board_record(args) -> dict:
    scan = fake_scan(kinetics_like_videos(args.videos, args.gops[0]))
    plans = plan_pair(task_configs("", FAKE_ROOT, args.epochs), scan, args.k_epochs,
                      coordinate=True)
    store = window_store(plans, args.store_share)
    runs = [board_seconds(plans, store) for _ in range(args.repeats)]
    clips = sum(len(v.uses) for w in (0, 1) for v in plan_window(plans, w).videos.values())
    return {"record": "board", "videos": args.videos, "clips": clips,
            "store_share": args.store_share,
            **{name: summary([r[name] for r in runs]) for name in runs[0]}}


def lead_record(args) -> dict:
    """CPU seconds of window 0's lead part (`parts.lead_part`: each task's first
    `planning.LEAD_BATCHES` batches' videos, with all their clips in the window), beside the
    whole window's, medians over --repeats."""
    scan = fake_scan(kinetics_like_videos(args.videos, args.gops[0]))
    plans = plan_pair(task_configs("", FAKE_ROOT, args.epochs), scan, args.k_epochs,
                      coordinate=True)
    lead = lead_part(plans, dict.fromkeys((p.name for p in plans), 0), 0, 0, LEAD_BATCHES)
    runs = []
    for _ in range(args.repeats):
        cpu = time.process_time()
        part = plan_window(plans, 0, lead=lead)
        runs.append(time.process_time() - cpu)
    return {"record": "lead_part", "videos": args.videos, "lead_videos": len(lead),
            "lead_views": len(part.views), "cpu_s": summary(runs)}


def stopped_after(plans: list[TaskPlan], after_s: float) -> tuple[float, float]:
    """Plan window 0 in a thread, told to stop `after_s` in: (seconds it ran, seconds from the
    stop to its end); it ran whole (0 from the stop) when it ended first."""
    stop, done = threading.Event(), threading.Event()

    def planning() -> None:
        STOP_PLANNING.set(stop.is_set)  # this thread's own context
        with contextlib.suppress(PlanningStopped):
            plan_window(plans, 0)
        done.set()

    started = time.perf_counter()
    thread = threading.Thread(target=planning, name="planning")
    thread.start()
    ended_first = done.wait(after_s)
    asked = time.perf_counter()
    stop.set()
    thread.join()
    ended = time.perf_counter()
    return ended - started, 0.0 if ended_first else ended - asked


def stop_record(args) -> dict:
    scan = fake_scan(kinetics_like_videos(args.videos, args.gops[0]))
    plans = plan_pair(task_configs("", FAKE_ROOT, args.epochs), scan, args.k_epochs,
                      coordinate=True)
    whole = time.perf_counter()
    plan_window(plans, 0)
    whole = time.perf_counter() - whole
    runs = [stopped_after(plans, args.stop_after_s) for _ in range(args.repeats)]
    return {"record": "planning_stop", "videos": args.videos, "window_s": round(whole, 2),
            "stop_after_s": args.stop_after_s, "ran_s": summary([r for r, _ in runs]),
            "stop_s": summary([s for _, s in runs])}


# -- Figure 20: loss with and without planning ------------------------------------------------


def write_bars_video(path: Path, class_index: int, rng: np.random.Generator) -> None:
    """Bars at 45 * class_index degrees drifting across the frame, in the class's hue
    (jittered per video) over a random gray, with pixel noise."""
    yy, xx = np.mgrid[0:BARS_SIZE_PX, 0:BARS_SIZE_PX].astype(np.float32)
    theta = math.radians(45 * class_index)
    across_px = xx * math.cos(theta) + yy * math.sin(theta)
    period_px = rng.uniform(12, 20)
    speed_px = rng.uniform(1, 3) * rng.choice([-1, 1])
    bar_rgb = np.clip(np.array(BARS_HUES[class_index]) + rng.normal(0, 40, 3), 0, 255)
    background_rgb = np.full(3, rng.uniform(40, 200))
    options = {"x264-params": f"keyint={BARS_GOP_FRAMES}:min-keyint={BARS_GOP_FRAMES}:"
               "scenecut=0:bframes=0", "preset": "veryfast", "crf": "23"}
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30, options=options)
        stream.width = stream.height = BARS_SIZE_PX
        stream.pix_fmt = "yuv420p"
        for index in range(BARS_FRAMES):
            on = ((across_px + speed_px * index) % period_px) < period_px / 2
            rgb = np.where(on[..., None], bar_rgb, background_rgb)
            rgb = np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).astype(np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode(None))


def write_bars_dataset(root: Path) -> float:
    """ROOT/classK/vNN.mp4, written afresh; returns the seconds it took."""
    shutil.rmtree(root, ignore_errors=True)
    started, rng = time.perf_counter(), np.random.default_rng(0)
    for class_index in range(BARS_CLASSES):
        (root / f"class{class_index}").mkdir(parents=True)
        for i in range(BARS_VIDEOS_PER_CLASS):
            write_bars_video(root / f"class{class_index}" / f"v{i:02d}.mp4", class_index, rng)
    return time.perf_counter() - started


def keep_reference_decodes() -> None:
    """reference_array decodes each video of a batch from scratch; these videos never change,
    so decode each once (48 videos of 60 96x96 frames: 80 MB)."""
    reference.decode_all_reference = functools.cache(reference.decode_all_reference)


def train_losses(plan: TaskPlan, epochs: int) -> list[float]:
    """TinyVideoNet from a fixed init, Adam, one step per batch of reference_array."""
    import torch

    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    from train_demo import TinyVideoNet

    torch.manual_seed(0)
    model = TinyVideoNet(len(plan.class_names))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for epoch in range(epochs):
        for iteration in range(plan.iterations_per_epoch):
            clips = torch.from_numpy(reference.reference_array(plan, epoch, iteration))
            labels = torch.tensor([plan.label_index(plan.labels[c.video_index])
                                   for c in plan.view_plan(epoch, iteration).clips])
            loss = torch.nn.functional.cross_entropy(model(clips), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(round(loss.item(), 5))
    return losses


def epoch_means(losses: list[float], epochs: int) -> list[float]:
    return [round(float(m), 5) for m in np.mean(np.reshape(losses, (epochs, -1)), axis=1)]


def gap(first: list[float], second: list[float]) -> dict:
    difference = np.abs(np.subtract(first, second))
    return {"max": round(float(difference.max()), 4), "mean": round(float(difference.mean()), 4)}


def loss_records(args) -> list[dict]:
    root = args.out_dir / "bars-dataset"  # a fixed path: the dataset path seeds the plans
    dataset_s = write_bars_dataset(root)
    scan = scan_dataset(root, (".mp4",))
    keep_reference_decodes()
    runs: dict[str, dict[str, list[float]]] = {task: {} for task in TASKS}
    started = time.perf_counter()
    for label, seed, coordinate in LOSS_RUNS:
        configs = task_configs("-tiny", scan.root, args.train_epochs, seed)
        for plan in plan_pair(configs, scan, args.k_epochs, coordinate=coordinate):
            runs[plan.name][label] = train_losses(plan, args.train_epochs)
    train_s = time.perf_counter() - started
    records = []
    for task, losses in runs.items():
        means = {label: epoch_means(values, args.train_epochs) for label, values in losses.items()}
        records.append({
            "record": "loss", "task": task, "epochs": args.train_epochs,
            "iterations_per_epoch": len(losses["planned"]) // args.train_epochs,
            "dataset_s": round(dataset_s, 2), "train_s_all_runs": round(train_s, 2),
            "per_iteration": losses, "per_epoch_mean": means,
            "gap_planned_vs_independent": {
                "per_iteration": gap(losses["planned"], losses["independent"]),
                "per_epoch_mean": gap(means["planned"], means["independent"])},
            "gap_independent_seed0_vs_seed1": {
                "per_iteration": gap(losses["independent"], losses["independent_seed1"]),
                "per_epoch_mean": gap(means["independent"], means["independent_seed1"])},
        })
    return records


def plot_losses(records: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(records), figsize=(5 * len(records), 3.5), squeeze=False)
    for ax, record in zip(axes[0], records, strict=True):
        per_epoch = record["iterations_per_epoch"]
        for (label, losses), style in zip(record["per_iteration"].items(), ("o-", "s--", "^:"),
                                          strict=True):
            line, = ax.plot(np.arange(len(losses)) / per_epoch, losses, linewidth=0.6,
                            alpha=0.5)
            ax.plot(np.arange(record["epochs"]) + 0.5, record["per_epoch_mean"][label], style,
                    color=line.get_color(), markersize=4, label=f"{label} (epoch mean)")
        ax.set(xlabel="epoch", ylabel="training loss", title=f"{record['task']} (Figure 20)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- main -------------------------------------------------------------------------------------


def figure_records(args) -> list[dict]:
    configs = task_configs("", FAKE_ROOT, args.epochs, mae_crop=args.mae_crop)
    records = []
    for gop_frames in args.gops:
        scan = fake_scan(kinetics_like_videos(args.videos, gop_frames))
        plans = {mode: plan_pair(configs, scan, args.k_epochs, coordinate=mode == "planned")
                 for mode in ("planned", "independent")}
        totals = {mode: plan_report(p, args.epochs)["total"] for mode, p in plans.items()}
        records.append(operations_record(totals["planned"], totals["independent"], gop_frames))
    # which frames clips select does not depend on the keyframes: the last GOP's plans do
    counts = {mode: selection_counts(p, args.epochs) for mode, p in plans.items()}
    counts["iid"] = iid_selection_counts(plans["independent"], args.epochs)
    records.append({"record": "reuse", "epochs": args.epochs,
                    "modes": {mode: reuse_figures(c) for mode, c in counts.items()}})
    return records


def summary_record(records: list[dict]) -> dict:
    headline: dict[str, object] = {"record": "summary", "paper": PAPER}
    for record in records:
        if record["record"] == "operations":
            headline[f"gop{record['gop_frames']}"] = {
                k: record[k] for k in ("decode_cut", "decode_cut_by_coordination", "crop_cut",
                                       "aug_cut")}
        elif record["record"] == "reuse":
            headline["reuse_4plus"] = {m: f["share_4plus"] for m, f in record["modes"].items()}
        elif record["record"] == "planning_time":
            headline["planning_wall_s_per_1000_videos"] = record["wall_s_per_1000_videos"]
        elif record["record"] == "board":
            headline["board_add_windows_s"] = record["add_windows_s"]["median"]
        elif record["record"] == "planning_stop":
            headline["planning_stop_s"] = record["stop_s"]["median"]
        elif record["record"] == "loss":
            headline[f"loss_gap_{record['task']}"] = {
                "planned_vs_independent": record["gap_planned_vs_independent"],
                "independent_seed0_vs_seed1": record["gap_independent_seed0_vs_seed1"]}
    return headline


def write_plots(records: list[dict], out_dir: Path) -> list[str]:
    if not have_matplotlib():
        print("note: matplotlib is not installed: no plots (pip install matplotlib)",
              file=sys.stderr)
        return []
    written = []
    for record in records:
        if record["record"] == "reuse":
            plot_reuse(record["modes"], out_dir / "reuse.png")
            written.append(str(out_dir / "reuse.png"))
    losses = [r for r in records if r["record"] == "loss"]
    if losses:
        plot_losses(losses, out_dir / "loss.png")
        written.append(str(out_dir / "loss.png"))
    return written


def main() -> int:
    args = parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    emit({"record": "params", "bench": "planning", **{k: (str(v) if isinstance(v, Path) else v)
          for k, v in vars(args).items()}, "load_average": os.getloadavg(),
          "machine": machine_info()})
    records = []
    if "figures" in args.parts:
        records += figure_records(args)
    if "timing" in args.parts:
        records.append(timing_record(args))
    if "board" in args.parts:
        records.append(board_record(args))
    if "stop" in args.parts:
        records.append(stop_record(args))
    if "lead" in args.parts:
        records.append(lead_record(args))
    if "loss" in args.parts:
        records += loss_records(args)
    for record in records:
        emit(record)
    headline = summary_record(records)
    headline["plots"] = write_plots(records, args.out_dir)
    emit(headline)
    print(yaml.safe_dump({k: v for k, v in headline.items() if k != "record"},
                         default_flow_style=None, sort_keys=False), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
