"""Figures from the benchmarks' JSON lines: PNGs for the README.

    .venv/bin/python benchmarks/bench_e2e.py > e2e.jsonl
    .venv/bin/python benchmarks/bench_planning.py --quick > planning.jsonl
    .venv/bin/python benchmarks/plot.py e2e.jsonl planning.jsonl --out-dir benchmarks/figures

From bench_e2e's `run` lines (medians over repeats; the whiskers span the repeats):
- throughput.png: batches/s of every peer, sandfs and the ideal feed, per scenario, one panel
  per mode (log scale: the ideal is the FUSE copy speed).
- gpu_busy.png: `gpu` mode's GPU-busy share in steady state (`gpu_busy_steady`), per system.
- frames_decoded.png: frames sandfs decoded against what independent loading decodes.
From bench_planning's `reuse` line:
- reuse.png: the CDF of how many clips select each frame (SAND's Figure 19).
A figure whose records are missing is left out with a note on stderr; bad lines are errors
with their file and line number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt
import numpy as np

FIXED_SYSTEMS = ("sandfs", "ideal")  # drawn last, after the peers in the order first seen
COLORS = {"sandfs": "#d62728", "ideal": "#7f7f7f"}


class PlotInputError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Figure:
    """A measured figure: median over repeats, and the repeats' range."""

    median: float
    low: float
    high: float


def read_records(paths: Iterable[Path]) -> list[dict]:
    """Every record of `paths`; a run's scenario is labelled with its epochs when its file's
    `params` gives them, so one scenario run at 10 and at 30 epochs draws as two groups."""
    records = []
    for path in paths:
        epochs = None
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PlotInputError(f"{path}:{number}: not JSON ({exc.msg})") from None
                if not isinstance(record, dict) or "record" not in record:
                    raise PlotInputError(f"{path}:{number}: expected an object with a "
                                         f"'record' key")
                if record["record"] == "params":
                    epochs = record.get("epochs")
                elif record["record"] == "run" and epochs is not None and "scenario" in record:
                    record["scenario"] = f"{record['scenario']}\n{epochs} epochs"
                records.append(record)
    return records


def run_figures(records: list[dict], key: str, mode: str | None = None
                ) -> dict[str, dict[str, Figure]]:
    """scenario -> system -> the `key` figure of its `run` lines (of `mode`, if given)."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["record"] == "run" and (mode is None or r.get("mode") == mode) \
                and r.get(key) is not None:
            values[r["scenario"]][r["system"]].append(float(r[key]))
    return {scenario: {system: Figure(statistics.median(v), min(v), max(v))
                       for system, v in systems.items()}
            for scenario, systems in values.items()}


def system_order(figures: dict[str, dict[str, Figure]]) -> list[str]:
    seen = dict.fromkeys(s for systems in figures.values() for s in systems)
    return [s for s in seen if s not in FIXED_SYSTEMS] + [s for s in FIXED_SYSTEMS if s in seen]


def grouped_bars(ax, figures: dict[str, dict[str, Figure]]) -> None:
    """One group of bars per scenario, one bar per system, whiskers over the repeats."""
    scenarios, systems = list(figures), system_order(figures)
    width = 0.8 / len(systems)
    palette = plt.get_cmap("tab20")
    for i, system in enumerate(systems):
        xs = [j + (i - (len(systems) - 1) / 2) * width
              for j, s in enumerate(scenarios) if system in figures[s]]
        got = [figures[s][system] for s in scenarios if system in figures[s]]
        medians = np.array([f.median for f in got])
        errors = np.array([[f.median - f.low for f in got], [f.high - f.median for f in got]])
        ax.bar(xs, medians, width, yerr=errors, capsize=2, label=system,
               color=COLORS.get(system, palette(i % 20)))
    ax.set_xticks(range(len(scenarios)), scenarios)


def plot_throughput(records: list[dict], path: Path) -> bool:
    modes = [m for m in dict.fromkeys(r.get("mode") for r in records if r["record"] == "run")
             if m is not None]
    if not modes:
        return False
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        grouped_bars(ax, run_figures(records, "batches_per_s", mode))
        ax.set(yscale="log", ylabel="batches/s (all tasks, from the first read)",
               title=f"Throughput, {mode} mode")
        ax.legend(fontsize=7)
    save(fig, path)
    return True


def plot_gpu_busy(records: list[dict], path: Path) -> bool:
    figures = run_figures(records, "gpu_busy_steady", "gpu")
    if not figures:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    grouped_bars(ax, figures)
    ax.set(ylim=(0, 1.05), ylabel="GPU busy share, steady state (worst task)",
           title="GPU kept busy (gpu mode)")
    ax.legend(fontsize=7)
    save(fig, path)
    return True


def plot_frames_decoded(records: list[dict], path: Path) -> bool:
    runs = [r for r in records if r["record"] == "run" and r.get("system") == "sandfs"
            and r.get("frames_decoded") is not None]
    if not runs:
        return False
    # every mode reads the same batches: the first mode seen stands for the scenario
    mode = runs[0].get("mode")
    decoded = run_figures(runs, "frames_decoded", mode)
    independent = run_figures(runs, "frames_decoded_independent", mode)
    bars = {scenario: {"sandfs": systems["sandfs"],
                       "independent loading": independent[scenario]["sandfs"]}
            for scenario, systems in decoded.items()}
    fig, ax = plt.subplots(figsize=(7, 4))
    grouped_bars(ax, bars)
    ax.set(ylabel="frames decoded", title="Frames decoded: sandfs vs independent loading")
    ax.legend(fontsize=8)
    save(fig, path)
    return True


def plot_reuse_cdf(records: list[dict], path: Path) -> bool:
    reuse = [r for r in records if r["record"] == "reuse"]
    if not reuse:
        return False
    from bench_planning import plot_reuse  # one drawing of Figure 19 for both scripts

    modes = {mode: {**figures, "histogram": {int(times): frames for times, frames
                                             in figures["histogram"].items()}}
             for mode, figures in reuse[-1]["modes"].items()}  # JSON made the keys strings
    plot_reuse(modes, path)
    return True


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PLOTS = {"throughput.png": plot_throughput, "gpu_busy.png": plot_gpu_busy,
         "frames_decoded.png": plot_frames_decoded, "reuse.png": plot_reuse_cdf}


def write_figures(records: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in PLOTS.items():
        try:
            drawn = plot(records, out_dir / name)
        except (KeyError, TypeError, ValueError) as exc:
            raise PlotInputError(f"{name}: a record lacks a field or has a bad value: "
                                 f"{exc!r}") from None
        if drawn:
            written.append(out_dir / name)
        else:
            print(f"note: no records for {name}: left out", file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", type=Path, metavar="FILE.jsonl")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/figures"))
    args = parser.parse_args(argv)
    try:
        written = write_figures(read_records(args.inputs), args.out_dir)
    except (OSError, PlotInputError) as exc:
        print(f"plot.py: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
