"""Cache format costs: encode/decode CPU per object and the size ratio, per format and size.

Frames come from a noisy synthetic H.264 video (`write_test_video(noise=True)`) decoded with
`decode_all_reference`, so they carry codec texture like real footage. `--store` also times a
put/get round trip through an `ObjectStore` on a temp dir (header, checksum, file I/O included).
One JSON object per line: params, median/p90/max ms, ratio, machine info.

    .venv/bin/python benchmarks/bench_formats.py --sizes 160x120 340x256 --reps 5 --store
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sandfs.cache.formats import CODECS, codec_for
from sandfs.cache.keys import ObjectKey
from sandfs.cache.store import ObjectStore
from sandfs.media.decode import decode_all_reference
from sandfs.media.synth import write_test_video


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["160x120", "340x256"], help="WxH")
    parser.add_argument("--formats", nargs="+", default=list(CODECS), choices=list(CODECS))
    parser.add_argument("--frames", type=int, default=48, help="frames decoded per size")
    parser.add_argument("--clip-frames", type=int, default=16, help="frames per clip object")
    parser.add_argument("--reps", type=int, default=5, help="timed passes over all frames")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes first")
    parser.add_argument("--float32", action="store_true", help="also normalized float32 frames")
    parser.add_argument("--store", action="store_true", help="also time ObjectStore put/get")
    return parser.parse_args()


def machine_info() -> dict[str, object]:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sha = None
    return {"cores": os.cpu_count(), "git_sha": sha, "python": platform.python_version(),
            "numpy": np.__version__, "machine": platform.machine()}


def decoded_frames(width: int, height: int, num_frames: int, workdir: str) -> list[np.ndarray]:
    path = os.path.join(workdir, f"noise_{width}x{height}.mp4")
    write_test_video(path, num_frames=num_frames, width=width, height=height, noise=True, seed=7)
    return decode_all_reference(path)


def summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {"median": round(statistics.median(ordered), 4),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
            "max": round(ordered[-1], 4)}


def timed(passes: int, warmup: int, objects: list[np.ndarray],
          step: Callable[[int, np.ndarray], object]) -> list[float]:
    """ms per object, over `passes` timed passes after `warmup` untimed ones."""
    samples_ms = []
    for pass_index in range(warmup + passes):
        for index, array in enumerate(objects):
            start = time.perf_counter()
            step(index, array)
            if pass_index >= warmup:
                samples_ms.append((time.perf_counter() - start) * 1e3)
    return samples_ms


def bench_codec(fmt: str, objects: list[np.ndarray], args: argparse.Namespace) -> dict:
    codec = codec_for(fmt, objects[0])
    payloads = [codec.encode(array) for array in objects]
    for array, payload in zip(objects, payloads, strict=True):
        decoded = codec.decode(memoryview(payload), array.shape, array.dtype)
        assert np.array_equal(decoded, array), f"{fmt} is not lossless"
    encode_ms = timed(args.reps, args.warmup, objects, lambda i, a: codec.encode(a))
    decode_ms = timed(args.reps, args.warmup, objects,
                      lambda i, a: codec.decode(memoryview(payloads[i]), a.shape, a.dtype))
    raw_nbytes = sum(array.nbytes for array in objects)
    return {"encode_ms": summary(encode_ms), "decode_ms": summary(decode_ms),
            "ratio": round(sum(len(p) for p in payloads) / raw_nbytes, 4)}


def bench_store(fmt: str, kind: str, objects: list[np.ndarray], args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_store_") as root:
        store = ObjectStore(root, budget_bytes=1 << 40)
        store.open()
        keys = [ObjectKey.of(kind, fmt, i) for i in range(len(objects))]
        put_ms = timed(1, 0, objects, lambda i, a: store.put(keys[i], a, fmt=fmt))
        get_ms = timed(args.reps, args.warmup, objects, lambda i, a: store.get(keys[i]))
        store.close()
    return {"put_ms": summary(put_ms), "get_ms": summary(get_ms)}


def object_sets(frames: list[np.ndarray], args: argparse.Namespace) -> list[tuple[str, list]]:
    clips = [np.stack(frames[i : i + args.clip_frames])
             for i in range(0, len(frames) - args.clip_frames + 1, args.clip_frames)]
    sets = [("frame", frames), ("clip", clips)]
    if args.float32:
        sets.append(("aug", [(f.astype(np.float32) - 114.0) / 57.0 for f in frames]))
    return sets


def main() -> int:
    args = parse_args()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench_formats_") as workdir:
        for size in args.sizes:
            width, height = (int(n) for n in size.split("x"))
            frames = decoded_frames(width, height, args.frames, workdir)
            for kind, objects in object_sets(frames, args):
                for fmt in args.formats:
                    if not CODECS[fmt].accepts(objects[0]):
                        continue
                    row = {"bench": "formats", "format": fmt, "kind": kind, "size": size,
                           "dtype": str(objects[0].dtype), "shape": list(objects[0].shape),
                           "objects": len(objects), "reps": args.reps, "warmup": args.warmup,
                           **bench_codec(fmt, objects, args)}
                    if args.store:
                        row.update(bench_store(fmt, kind, objects, args))
                    print(json.dumps({**row, "machine": machine}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
