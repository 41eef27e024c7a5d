#!/usr/bin/env python3
"""Are threads enough? The daemon's hot path (selective decode -> RGB -> resize/crop/flip ->
copy into a batch) run by N threads and by N processes over the same work, for each N in
--workers; where threads scale like processes, the GIL does not cap the job threads on this
machine (the daemon's FUSE replies, which hold it too, are not in this path).

Usage: benchmarks/bench_threads.py [--videos 8] [--size 340x256] [--repeats 3] [--workers 1 2]
Prints one JSON object per configuration, then a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from sandfs import ops as oplib
from sandfs.media.decode import decode_frames
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import make_dataset

PIPELINE = [("resize", {"shape": [128, 171]}), ("random_crop", {"size": [112, 112]}),
            ("flip", {"direction": "horizontal"})]


def clip_work(info, start: int, seed: int) -> int:
    """One clip: 16 frames stride 4 decoded, augmented and stacked (what a job does per clip)."""
    indices = [min(start + 4 * j, info.num_frames - 1) for j in range(16)]
    frames = decode_frames(info, indices).frames
    rng = np.random.default_rng(seed)
    hw = (info.height, info.width)
    chain = []
    for name, raw in PIPELINE:
        inst = oplib.draw_instance(name, oplib.validate_op(name, raw), rng, hw)
        chain.append(inst)
        shape = oplib.get_op(name).output_shape(dict(inst.params), oplib.FrameShape(*hw))
        hw = (shape.height, shape.width)
    clip = np.stack(oplib.apply_chain(chain, [frames[i] for i in indices]))
    return int(clip.nbytes)


def run_batch(args: tuple) -> int:
    infos, seed = args
    total = 0
    for i, info in enumerate(infos):
        total += clip_work(info, (seed * 7 + i * 13) % max(1, info.num_frames - 61), seed + i)
    return total


def timed(mode: str, workers: int, infos, chunks: int) -> float:
    work = [(infos, seed) for seed in range(chunks)]
    started = time.perf_counter()
    if mode == "threads":
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run_batch, work))
    else:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(run_batch, work))
    return time.perf_counter() - started


def git_sha() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=8)
    parser.add_argument("--size", default="340x256")
    parser.add_argument("--chunks", type=int, default=4, help="work items per configuration")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="thread and process counts to run (a many-core machine: 1 2 4 8)")
    args = parser.parse_args()
    if min(args.workers) < 1:
        parser.error("--workers: counts of 1 or more")
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as root:
        make_dataset(root, classes=1, videos_per_class=args.videos, num_frames=(200, 250),
                     size=(width, height), gop=250, noise=True)
        infos = list(scan_dataset(root, (".mp4",)).videos)
        run_batch((infos[:1], 0))  # warm-up
        clips = args.chunks * len(infos)
        results = {}
        counts = sorted(set(args.workers))
        configs = [(mode, n) for n in counts for mode in ("threads", "processes")]
        for mode, workers in configs:
            seconds = [timed(mode, workers, infos, args.chunks) for _ in range(args.repeats)]
            median = statistics.median(seconds)
            results[(mode, workers)] = clips / median
            print(json.dumps({"bench": "threads", "mode": mode, "workers": workers,
                              "clips": clips, "median_seconds": round(median, 3),
                              "clips_per_second": round(clips / median, 2),
                              "size": args.size, "cores": os.cpu_count(), "git": git_sha()}))
    one = results[("threads", counts[0])]
    print(json.dumps({"bench": "threads_summary", "baseline": f"{counts[0]} thread(s)",
                      **{f"{mode}_{n}_speedup": round(rate / one, 2)
                         for (mode, n), rate in results.items()},
                      **{f"threads_over_processes_{n}":
                         round(results[("threads", n)] / results[("processes", n)], 2)
                         for n in counts}}))


if __name__ == "__main__":
    main()
