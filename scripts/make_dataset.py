#!/usr/bin/env python3
"""Generate a small sample video dataset in class folders (painted, noisy H.264 clips).

Usage: scripts/make_dataset.py OUT_DIR [--classes 4] [--videos-per-class 8] [--size 160x120]
"""

from __future__ import annotations

import argparse
import time

from sandfs.media.synth import make_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--videos-per-class", type=int, default=8)
    parser.add_argument("--size", default="160x120", help="WxH")
    parser.add_argument("--frames", default="48,96", help="min,max frames per video")
    parser.add_argument("--gop", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    low, high = (int(v) for v in args.frames.split(","))
    started = time.monotonic()
    paths = make_dataset(args.out_dir, classes=args.classes, videos_per_class=args.videos_per_class,
                         num_frames=(low, high), size=(width, height), seed=args.seed,
                         gop=args.gop, noise=True)
    print(f"made {len(paths)} videos in {args.out_dir} ({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    main()
