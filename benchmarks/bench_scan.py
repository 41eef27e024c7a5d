"""Dataset scan cost: the demuxing probe (packets counted, one frame decoded) against the
decoding probe it replaced (every frame decoded; still the fallback for untrusted kinds).

1. Per video, in this process, one after the other: wall and CPU seconds of each probe on a
   mixed dataset (H.264 with B-frames in mp4/mkv/ts, HEVC, VP9 webm, MPEG-4 avi, MPEG-2 ps).
2. Cold scan: `scan_dataset` (worker processes, no index) of many short videos (3 s, 160x120),
   then a daemon's lazy scan (`start_lazy_scan`, its background probes, to the end): videos/s,
   CPU seconds per 1,000 videos of this process and its workers (their start included) and of
   this process alone (a daemon's scan thread: its GIL share); the decoding probe over the
   same files in this process (no worker overhead) for comparison. `--dataset DIR`: these two
   on a folder of videos already made (`bench_scale.py`'s hard links), after the CPU of one
   probe of its first video, of its index row and of its hand-off, in this process.
3. Held: the bytes a video a daemon's lazy scan holds once it is done (tracemalloc, over the
   videos listed): `scan_bytes_per_video` cold (no scan index; it writes one), then
   `warm_scan_bytes_per_video` listed from that index, every entry read.
4. Cold mount of the same short videos, the way a user meets it: `sandfs mount` launched on an
   empty cache dir (scan, plan, mount), then the first batch of a small task (8 clips of
   16x112x112, k = 5) read through the mount: seconds from the launch to serving and to the
   first batch in hand, and the daemon's CPU seconds by then.
One JSON object per line.

    .venv/bin/python benchmarks/bench_scan.py --quick
    .venv/bin/python benchmarks/bench_scan.py --videos 40 --short-videos 1000
    .venv/bin/python benchmarks/bench_scan.py --dataset /tmp/scale/videos-100000
"""

from __future__ import annotations

import argparse
import gc
import pickle
import resource
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    compile_sandfs,
    emit,
    fill_defaults,
    machine_info,
    sandfs_mount,
    settle_disk,
    summary,
    tree_cpu_seconds,
)

from sandfs.media import probe
from sandfs.media.scan import scan_dataset, start_lazy_scan
from sandfs.media.scan_index import save_index
from sandfs.media.synth import write_test_video
from sandfs.media.types import (
    DECODING,
    DatasetScan,
    ListedVideo,
    MediaLimits,
    ProbeFacts,
    ProbeResult,
)

KINDS = (  # (extension, encoder, extra options)
    ("mp4", "libx264", {"bframes": 3, "b_adapt": False}),
    ("mkv", "libx264", {"bframes": 3, "b_adapt": False}),
    ("ts", "libx264", {"bframes": 3, "b_adapt": False}),
    ("mp4", "libx265", {"bframes": 3, "b_adapt": False}),
    ("webm", "libvpx-vp9", {}),
    ("avi", "mpeg4", {}),
    ("mpg", "mpeg2video", {"bframes": 2}),
    ("mp4", "libx264", {}),
)
DEFAULTS = {
    "quick": {"videos": 8, "frames": 100, "size": "160x120", "short_videos": 100},
    "full": {"videos": 40, "frames": 300, "size": "340x256", "short_videos": 1000},
}
LIMITS = MediaLimits()


def make_mixed(root: Path, videos: int, frames: int, width: int, height: int) -> list[Path]:
    paths = []
    for i in range(videos):
        ext, codec, options = KINDS[i % len(KINDS)]
        path = root / f"{i:03d}_{codec}.{ext}"
        write_test_video(path, num_frames=frames, width=width, height=height, codec=codec,
                         gop=250, noise=True, seed=i, **options)
        paths.append(path)
    return paths


def make_short(root: Path, videos: int) -> list[Path]:
    """3 s clips at 160x120, H.264 with B-frames, 100 to a folder."""
    paths = []
    for i in range(videos):
        path = root / f"class{i // 100:03d}" / f"short_{i:05d}.mp4"
        path.parent.mkdir(exist_ok=True)
        write_test_video(path, num_frames=75, width=160, height=120, noise=True, seed=i,
                         bframes=3, b_adapt=False)
        paths.append(path)
    return paths


def decoding_probe(path: Path) -> ProbeResult:
    """The scan before packets were counted: decode every frame of the best stream."""
    with probe._open_checked(str(path), None) as container:
        stream_index = container.streams.best("video").index
        return probe._count_frames(container, stream_index, LIMITS, "decoding")


def timed(function, path: Path) -> tuple[float, float, ProbeResult]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(path)
    return time.perf_counter() - wall, time.process_time() - cpu, result


def per_video(paths: list[Path]) -> None:
    rows = []
    for path in paths:
        old_wall, old_cpu, old = timed(decoding_probe, path)
        new_wall, new_cpu, new = timed(lambda p: probe.probe_video(str(p), LIMITS), path)
        assert isinstance(new, ProbeFacts) and isinstance(old, ProbeFacts), path
        assert new.num_frames == old.num_frames, path
        rows.append({"video": path.name, "frames": new.num_frames,
                     "counted_by": new.counted_by, "decode_ms": round(old_wall * 1e3, 2),
                     "decode_cpu_ms": round(old_cpu * 1e3, 2),
                     "demux_ms": round(new_wall * 1e3, 2),
                     "demux_cpu_ms": round(new_cpu * 1e3, 2)})
        emit({"per_video": rows[-1]})
    ratio = [r["decode_cpu_ms"] / max(r["demux_cpu_ms"], 1e-3) for r in rows]
    emit({"per_video_summary": {
        "decode_ms": summary([r["decode_ms"] for r in rows]),
        "decode_cpu_ms": summary([r["decode_cpu_ms"] for r in rows]),
        "demux_ms": summary([r["demux_ms"] for r in rows]),
        "demux_cpu_ms": summary([r["demux_cpu_ms"] for r in rows]),
        "cpu_speedup_median": round(statistics.median(ratio), 1),
        "cpu_speedup_total": round(sum(r["decode_cpu_ms"] for r in rows)
                                   / sum(r["demux_cpu_ms"] for r in rows), 1),
        "decoded_in_full": sum(r["counted_by"].startswith(DECODING) for r in rows)}})


def cpu_seconds() -> tuple[float, float]:
    """This process's (a daemon's scan thread: its GIL share) and its waited-for children's
    (the probe workers')."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def scan_figures(videos: int, wall: float, own: float, workers: float) -> dict:
    return {"videos": videos, "scan_s": round(wall, 2), "videos_per_s": round(videos / wall),
            "cpu_s_per_1000_videos": round((own + workers) / videos * 1e3, 3),
            "own_cpu_s_per_1000_videos": round(own / videos * 1e3, 3),
            "scan_ms_per_video": round(wall / videos * 1e3, 3)}


def timed_scan(scan) -> tuple[DatasetScan, dict]:
    wall, (own, workers) = time.perf_counter(), cpu_seconds()
    found = scan()
    (own_after, workers_after), wall = cpu_seconds(), time.perf_counter() - wall
    return found, scan_figures(len(found.listed or found.videos), wall, own_after - own,
                               workers_after - workers)


def cold_scan(root: Path, paths: list[Path], workers: int, decoding: bool = True) -> None:
    """`scan_dataset` (what `sandfs scan` runs): every file probed before it returns; with
    `decoding`, the decoding probe of each file in this process too."""
    scan, figures = timed_scan(lambda: scan_dataset(root, ["mp4"], limits=LIMITS,
                                                    workers=workers))
    assert len(scan.videos) == len(paths) and not scan.bad
    if decoding:
        wall, cpu = time.perf_counter(), time.process_time()
        for path in paths:
            decoding_probe(path)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        figures.update(decoding_probe_one_process_s=round(wall, 2),
                       decoding_probe_cpu_s=round(cpu, 2))
    emit({"cold_scan": {**figures, "workers": workers}})


def probe_costs(path: Path, repeats: int = 2000, rows: int = 20_000) -> None:
    """In this process: CPU microseconds of one probe of `path` (the median of 5 rounds of
    `repeats`), of its result's index row (`save_index` of `rows` copies) and of its hand-off
    (the result pickled and unpickled, as a worker's reply)."""
    rounds = []
    for _ in range(5):
        cpu = time.process_time()
        for _ in range(repeats):
            result = probe.probe_video(str(path), LIMITS)
        rounds.append((time.process_time() - cpu) / repeats * 1e6)
    entries = {f"v{i}.mp4": (ListedVideo(f"v{i}", f"v{i}.mp4", f"/d/v{i}.mp4", 1, 1), result)
               for i in range(rows)}
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as temp:
        cpu = time.process_time()
        save_index(Path(temp, "index.json"), LIMITS, "/d", entries)
        row_us = (time.process_time() - cpu) / rows * 1e6
    cpu = time.process_time()
    for _ in range(repeats):
        pickle.loads(pickle.dumps(result, pickle.HIGHEST_PROTOCOL))
    emit({"probe_costs": {"video": path.name, "counted_by": result.counted_by,
                          "probe_cpu_us": round(statistics.median(rounds), 1),
                          "index_row_cpu_us": round(row_us, 1),
                          "hand_off_cpu_us": round((time.process_time() - cpu) / repeats * 1e6,
                                                   1)}})


def lazy_scan(root: Path, paths: list[Path], workers: int) -> None:
    """`start_lazy_scan` (a daemon's), to its end, nothing waited for: the background
    probes alone."""
    def run() -> DatasetScan:
        found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(), limits=LIMITS,
                                        workers=workers)
        thread.join()
        return found

    scan, figures = timed_scan(run)
    assert scan.probes.probed == len(paths), (scan.probes.probed, len(paths))
    emit({"lazy_scan": {**figures, "workers": workers}})


def held_bytes(root: Path, paths: list[Path], workers: int, index: Path) -> None:
    """The bytes a video a daemon's lazy scan holds once done (module doc, part 3)."""
    figures = {}
    for name in ("scan_bytes_per_video", "warm_scan_bytes_per_video"):
        gc.collect()
        tracemalloc.start()
        try:  # a failed scan leaves no tracing behind to slow what runs next
            before = tracemalloc.get_traced_memory()[0]
            found, thread = start_lazy_scan(root, ["mp4"], stop=threading.Event(),
                                            limits=LIMITS, workers=workers, index_path=index)
            thread.join()
            found.probes.wait_all()  # every index entry read
            assert len(found.listed) == len(paths) and not found.bad
            gc.collect()
            figures[name] = round((tracemalloc.get_traced_memory()[0] - before) / len(paths), 1)
        finally:
            tracemalloc.stop()
        del found
    emit({"held": {"videos": len(paths), "workers": workers, **figures}})


def cold_mount(root: Path, paths: list[Path], workers: int, work_dir: Path) -> None:
    """The short videos mounted cold, to the first batch read (module doc, part 3)."""
    config = yaml.safe_load((Path(__file__).parent / "configs" / "single.yaml").read_text())
    config["task"] = "short"
    config["dataset"]["video_dataset_path"] = str(root)
    config_path = work_dir / "short.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    compile_sandfs()
    settle_disk()
    with sandfs_mount(work_dir, [config_path], k_epochs=5, workers=workers) as mount:
        batch = np.load(mount.mountpoint / "short" / "0" / "0" / "view")
        first_batch_s = time.monotonic() - mount.launched_at
        cpu_s = tree_cpu_seconds(mount.pid)
        videos = mount.status()["tasks"]["short"]["videos"]
    assert batch.shape == (8, 16, 112, 112, 3) and videos == len(paths), (batch.shape, videos)
    emit({"cold_mount": {
        "videos": len(paths), "workers": workers, "mount_s": round(mount.mount_s, 2),
        "first_batch_s": round(first_batch_s, 2), "daemon_cpu_s": round(cpu_s, 2)}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--videos", type=int, help="mixed-kind videos for the per-video figures")
    parser.add_argument("--frames", type=int, help="frames per mixed-kind video")
    parser.add_argument("--size", help="WxH of the mixed-kind videos")
    parser.add_argument("--short-videos", type=int, help="3 s 160x120 videos, cold scan")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dataset", type=Path,
                        help="scan this folder of .mp4 files instead (bench_scale.py's hard "
                             "links): the cold and lazy scans only")
    args = parser.parse_args()
    fill_defaults(parser, args, DEFAULTS, ["videos", "frames", "short_videos", "workers"])
    width, height = (int(n) for n in args.size.split("x"))
    emit({"bench": "scan", "params": {**vars(args), "dataset": str(args.dataset)},
          "machine": machine_info()})
    if args.dataset:
        paths = sorted(args.dataset.rglob("*.mp4"))
        probe_costs(paths[0])
        cold_scan(args.dataset, paths, args.workers, decoding=False)
        lazy_scan(args.dataset, paths, args.workers)
        with tempfile.TemporaryDirectory(prefix="bench-scan-") as temp:
            held_bytes(args.dataset, paths, args.workers, Path(temp, "index.json"))
        return
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as temp:
        mixed_root, short_root = Path(temp, "mixed"), Path(temp, "short")
        mixed_root.mkdir()
        short_root.mkdir()
        per_video(make_mixed(mixed_root, args.videos, args.frames, width, height))
        short = make_short(short_root, args.short_videos)
        cold_scan(short_root, short, args.workers)
        lazy_scan(short_root, short, args.workers)
        held_bytes(short_root, short, args.workers, Path(temp, "index.json"))
        cold_mount(short_root, short, args.workers, Path(temp))


if __name__ == "__main__":
    main()
