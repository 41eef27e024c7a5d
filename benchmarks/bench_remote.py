"""Network bytes: sandfs's fetch-once of a remote dataset against an on-demand loader that
reads each clip from the store every epoch.

The dataset (Kinetics-like synthetic videos, `common.DatasetSpec`) is put in a bucket of moto's
S3 server on loopback. sandfs: `prepare_remote_dataset` fetches it into a cache dir (and a
second prepare, a remount, fetches nothing); every epoch after that reads local files. The
on-demand loader, per epoch and per video, draws a clip (`--frames` frames `--stride` apart,
uniform start), opens the object with fsspec, hands the file object to PyAV, seeks to the
keyframe before the clip and decodes to its last frame, as a DataLoader worker would. Its bytes
are counted where fsspec fetches byte ranges from the store, in two settings: `exact` (no
read cache: each PyAV read is one ranged GET, the least any on-demand reader can fetch) and
`fsspec_default` (s3fs's readahead cache with its default block size). One JSON line each.

    .venv/bin/python benchmarks/bench_remote.py --quick
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

import av

sys.path.insert(0, str(Path(__file__).parent))
from common import DatasetSpec, emit, ensure_dataset, fill_defaults, machine_info

from sandfs.media.scan import scan_dataset
from sandfs.remote import prepare_remote_dataset

DEFAULTS = {
    "quick": {"classes": 2, "videos_per_class": 3, "epochs": 10},
    "full": {"classes": 4, "videos_per_class": 8, "epochs": 10},
}
EXTENSIONS = (".mp4",)
CREDENTIALS = {"key": "testing", "secret": "testing"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small dataset")
    parser.add_argument("--classes", type=int)
    parser.add_argument("--videos-per-class", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--frames", type=int, default=16, help="frames per clip")
    parser.add_argument("--stride", type=int, default=2, help="frame stride in a clip")
    parser.add_argument("--gop", type=int, default=250, help="frames between keyframes")
    parser.add_argument("--seconds", type=int, default=4, help="video length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path,
                        default=Path(tempfile.gettempdir()) / "sandfs-bench")
    args = parser.parse_args()
    fill_defaults(parser, args, DEFAULTS, ["classes", "videos_per_class", "epochs", "frames",
                                           "stride"])
    return args


class CountingFetcher:
    """Wraps an fsspec cache's fetcher: every call is one ranged GET to the store."""

    def __init__(self, fetch, totals: dict[str, int]) -> None:
        self._fetch = fetch
        self._totals = totals

    def __call__(self, start: int, end: int) -> bytes:
        data = self._fetch(start, end)
        self._totals["bytes"] += len(data)
        self._totals["requests"] += 1
        return data


def read_clip(fs, path: str, frame_pts: tuple[int, ...], indices: list[int],
              open_kwargs: dict, totals: dict[str, int]) -> int:
    """Open, seek to the keyframe before the clip, decode to its last frame; frames decoded."""
    with fs.open(path, "rb", **open_kwargs) as f:
        f.cache.fetcher = CountingFetcher(f.cache.fetcher, totals)
        with av.open(f) as container:
            stream = container.streams.video[0]
            container.seek(frame_pts[indices[0]], stream=stream, backward=True,
                           any_frame=False)
            decoded = 0
            for frame in container.decode(stream):
                decoded += 1
                if frame.pts is not None and frame.pts >= frame_pts[indices[-1]]:
                    break
    return decoded


def clip_plan(videos, epochs: int, frames: int, stride: int, seed: int):
    """(epoch, video, frame indices): one uniformly placed clip per video and epoch."""
    rng = random.Random(seed)
    span = (frames - 1) * stride + 1
    for epoch in range(epochs):
        for video in videos:
            start = rng.randrange(max(1, video.num_frames - span + 1))
            indices = [min(start + k * stride, video.num_frames - 1) for k in range(frames)]
            yield epoch, video, indices


def on_demand(fs, bucket: str, videos, args, open_kwargs: dict) -> dict:
    totals = {"bytes": 0, "requests": 0}
    per_epoch = [0] * args.epochs
    decoded = 0
    started = time.monotonic()
    for epoch, video, indices in clip_plan(videos, args.epochs, args.frames, args.stride,
                                           args.seed):
        before = totals["bytes"]
        decoded += read_clip(fs, f"{bucket}/{video.rel_path}", video.frame_pts, indices,
                             open_kwargs, totals)
        per_epoch[epoch] += totals["bytes"] - before
    return {"bytes_fetched": totals["bytes"], "requests": totals["requests"],
            "bytes_per_epoch": per_epoch, "frames_decoded": decoded,
            "seconds": round(time.monotonic() - started, 2)}


def main() -> None:
    args = parse_args()
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs each request
    spec = DatasetSpec(args.classes, args.videos_per_class, width=340, height=256,
                       seconds=(args.seconds, args.seconds), gop_frames=args.gop)
    dataset = ensure_dataset(args.data_dir, spec)
    emit({"bench": "remote", "params": vars(args) | {"data_dir": str(args.data_dir),
                                                     "dataset": spec.name},
          "machine": machine_info()})
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}", **CREDENTIALS}
        run(args, dataset, options)
    finally:
        server.stop()


def run(args: argparse.Namespace, dataset: Path, options: dict) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    bucket = "bench"
    fs.mkdir(bucket)
    files = sorted(p for p in dataset.rglob("*.mp4"))
    for path in files:
        fs.put_file(str(path), f"{bucket}/{path.relative_to(dataset).as_posix()}")
    dataset_bytes = sum(p.stat().st_size for p in files)
    with tempfile.TemporaryDirectory() as cache_dir:
        started = time.monotonic()
        copy = prepare_remote_dataset(f"s3://{bucket}", storage_options=options, manifest=None,
                                      cache_dir=cache_dir, extensions=EXTENSIONS)
        seconds = time.monotonic() - started
        remount = prepare_remote_dataset(f"s3://{bucket}", storage_options=options,
                                         manifest=None, cache_dir=cache_dir,
                                         extensions=EXTENSIONS)
        videos = scan_dataset(copy.root, EXTENSIONS, workers=2).videos
    sand = {"bytes_fetched": copy.stats.bytes_fetched, "requests": copy.stats.requests,
            "seconds": round(seconds, 2), "remount_bytes_fetched": remount.stats.bytes_fetched,
            "remount_requests": remount.stats.requests}
    emit({"bench": "remote", "loader": "sandfs", "videos": len(videos),
          "dataset_bytes": dataset_bytes, "epochs": args.epochs, **sand})
    for name, open_kwargs in (("exact", {"cache_type": "none"}),
                              ("fsspec_default", {})):
        result = on_demand(fs, bucket, videos, args, open_kwargs)
        ratio = result["bytes_fetched"] / max(1, copy.stats.bytes_fetched)
        emit({"bench": "remote", "loader": f"on_demand_{name}", "videos": len(videos),
              "dataset_bytes": dataset_bytes, "epochs": args.epochs, **result,
              "x_sandfs_bytes": round(ratio, 2)})


if __name__ == "__main__":
    main()
