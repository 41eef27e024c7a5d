"""Dataset scan: find the videos under a root, vet each file, count its frames by decoding.

Order of checks, cheapest and safest first:
1. names (hidden files, extensions, collisions) from the directory tree alone;
2. `lstat`/`stat` without opening: symlinks must resolve to a regular file inside the root,
   FIFOs/sockets/devices are refused (opening a FIFO hangs), empty and oversized files too;
3. a probe in a worker process (killed after `decode_timeout_seconds`): open with O_NOFOLLOW,
   choose the video stream, check the coded size, decode every frame once.
Probe results persist in an optional JSON index keyed by (rel_path, path, size, mtime), so a
remount of an unchanged dataset decodes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import stat
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from multiprocessing.connection import Connection, wait
from typing import Any

import av
from av.container import InputContainer
from av.stream import Disposition
from av.video.stream import VideoStream

from sandfs.media.decode import (
    NotRegularFileError,
    describe_error,
    open_regular_file,
    open_stream,
)
from sandfs.media.types import BadVideo, DatasetScan, MediaLimits, VideoInfo
from sandfs.workerproc import start_worker_process

log = logging.getLogger(__name__)

SCAN_VERSION = 2  # bump when probe results change meaning: older index files are then ignored
# (2: MPEG-TS/PS are not seekable)
INDEX_FORMAT = "sandfs-scan-index"
_AVFMT_NOTIMESTAMPS = 0x80  # raw elementary streams (.h264): no pts, no seeking by pts
# MPEG-TS / MPEG-PS: no index, timestamps may jump; a seek lands off plan for almost every
# request (measured), so those are decoded from the start instead of seeking and falling back
_AVFMT_TS_DISCONT = 0x200
_WORKER_READY = "ready"
_WORKER_START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class ProbeFacts:
    """What decoding one file taught us (everything in VideoInfo that is not about the path)."""

    width: int
    height: int
    num_frames: int
    frame_pts: tuple[int, ...] = field(repr=False)
    time_base: Fraction | None
    keyframe_indices: tuple[int, ...] = field(repr=False)
    seekable: bool
    rotation: int
    codec: str
    pix_fmt: str
    stream_index: int


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    reason: str
    detail: str
    lasting: bool = True  # False for timeouts and crashes, which depend on the machine's load


ProbeResult = ProbeFacts | ProbeFailure


@dataclass(frozen=True, slots=True)
class _Candidate:
    rel_path: str
    name: str  # VIDEO name: rel_path without extension


@dataclass(frozen=True, slots=True)
class _Target:
    """A candidate that passed the stat checks: what to open and what identifies its content."""

    rel_path: str
    name: str
    path: str  # absolute, symlinks resolved
    size_bytes: int
    mtime_ns: int
    device: int
    inode: int


# ---------------------------------------------------------------------------- entry point


def scan_dataset(
    root: str | os.PathLike[str],
    extensions: Iterable[str],
    *,
    limits: MediaLimits | None = None,
    workers: int = 2,
    index_path: str | os.PathLike[str] | None = None,
) -> DatasetScan:
    """Scans `root` for videos with one of `extensions` (case-insensitive, with or without the
    dot). `limits` default to MediaLimits.from_env(). Never raises for a bad file: it is
    reported in `DatasetScan.bad` and logged once at WARNING."""
    started = time.monotonic()
    limits = limits or MediaLimits.from_env()
    real_root = os.path.realpath(root)
    if not os.path.isdir(real_root):
        raise NotADirectoryError(f"dataset root is not a directory: {os.fspath(root)!r}")
    candidates = _list_candidates(real_root, extensions)
    named, bad = _claim_names(candidates)
    targets: list[_Target] = []
    for candidate in named:
        checked = _check_file(real_root, candidate, limits)
        if isinstance(checked, BadVideo):
            bad.append(checked)
        else:
            targets.append(checked)
    known = _load_index(index_path, limits) if index_path else {}
    results = {t.rel_path: known[t.rel_path][1] for t in targets if _index_hit(known, t)}
    to_probe = [t for t in targets if t.rel_path not in results]
    results.update(_probe_files(to_probe, limits, workers))
    if index_path:
        _save_index(index_path, limits, targets, results)
    videos = []
    for target in targets:
        result = results[target.rel_path]
        if isinstance(result, ProbeFailure):
            bad.append(BadVideo(target.rel_path, result.reason, result.detail))
        else:
            videos.append(_video_info(target, result))
    scan = _finish(real_root, videos, bad, num_probed=len(to_probe))
    log.info(
        "scanned %s: %d usable, %d bad, %d probed, %d from the index, %.2f s",
        ascii(real_root), len(scan.videos), len(scan.bad), len(to_probe),
        len(targets) - len(to_probe), time.monotonic() - started,
    )  # fmt: skip
    return scan


def _finish(
    root: str, videos: list[VideoInfo], bad: list[BadVideo], num_probed: int
) -> DatasetScan:
    bad.sort(key=lambda b: b.rel_path)
    for item in bad:
        name = os.path.splitext(item.rel_path)[0]
        log.warning(
            "video=%s path=%s reason=%s detail=%s",
            ascii(name), ascii(item.rel_path), item.reason, ascii(item.detail),
        )  # fmt: skip
    videos.sort(key=lambda v: v.name)
    return DatasetScan(root, tuple(videos), tuple(bad), num_probed)


def _video_info(target: _Target, facts: ProbeFacts) -> VideoInfo:
    return VideoInfo(
        name=target.name,
        rel_path=target.rel_path,
        path=target.path,
        size_bytes=target.size_bytes,
        mtime_ns=target.mtime_ns,
        **{f: getattr(facts, f) for f in ProbeFacts.__dataclass_fields__},
    )


# ---------------------------------------------------------------------------- names


def _list_candidates(real_root: str, extensions: Iterable[str]) -> list[_Candidate]:
    """Files under `real_root` with a wanted extension, sorted by relative path; hidden
    files and folders are skipped, symlinked folders are not entered."""
    wanted = {"." + ext.lower().lstrip(".") for ext in extensions}
    candidates = []
    for dir_path, dir_names, file_names in os.walk(real_root, onerror=_log_walk_error):
        dir_names[:] = [d for d in dir_names if not d.startswith(".")]
        rel_dir = os.path.relpath(dir_path, real_root)
        for file_name in file_names:
            ext = os.path.splitext(file_name)[1]
            if file_name.startswith(".") or ext.lower() not in wanted:
                continue
            rel_path = file_name if rel_dir == "." else f"{rel_dir}/{file_name}"
            rel_path = rel_path.replace(os.sep, "/")
            candidates.append(_Candidate(rel_path, rel_path[: len(rel_path) - len(ext)]))
    candidates.sort(key=lambda c: c.rel_path)
    return candidates


def _log_walk_error(error: OSError) -> None:
    log.warning("cannot list %s: %s", ascii(error.filename), ascii(error.strerror))


def _claim_names(candidates: list[_Candidate]) -> tuple[list[_Candidate], list[BadVideo]]:
    """In sorted order, a file whose VIDEO name is taken by an earlier file, equals the folder
    of an earlier file, or lies under a folder named like an earlier video is a collision."""
    owner_by_name: dict[str, str] = {}  # VIDEO name -> rel_path
    owner_by_folder: dict[str, str] = {}  # folder path -> first rel_path in it
    named, bad = [], []
    for candidate in candidates:
        folders = _ancestor_folders(candidate.name)
        clash = owner_by_name.get(candidate.name) or owner_by_folder.get(candidate.name)
        clash = clash or next((owner_by_name[f] for f in folders if f in owner_by_name), None)
        if clash:
            bad.append(
                BadVideo(candidate.rel_path, "name_collision", f"name collides with {clash}")
            )
            continue
        owner_by_name[candidate.name] = candidate.rel_path
        for folder in folders:
            owner_by_folder.setdefault(folder, candidate.rel_path)
        named.append(candidate)
    return named, bad


def _ancestor_folders(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# ---------------------------------------------------------------------------- stat checks


def _check_file(real_root: str, candidate: _Candidate, limits: MediaLimits) -> _Target | BadVideo:
    """Vets a candidate with lstat/stat/realpath only: nothing is opened here."""
    path = os.path.join(real_root, candidate.rel_path)

    def bad(reason: str, detail: str) -> BadVideo:
        return BadVideo(candidate.rel_path, reason, detail)

    try:
        link_stat = os.lstat(path)
        if stat.S_ISLNK(link_stat.st_mode):
            path = os.path.realpath(path)
        file_stat = os.stat(path) if stat.S_ISLNK(link_stat.st_mode) else link_stat
    except OSError as error:
        return bad("open_invalid", f"cannot stat: {error.strerror}")
    if not stat.S_ISREG(file_stat.st_mode):
        return bad("not_regular", f"not a regular file ({_file_kind(file_stat.st_mode)})")
    if os.path.commonpath([real_root, path]) != real_root:
        return bad("outside_root", "symlink resolves outside the dataset root")
    if file_stat.st_size == 0:
        return bad("open_invalid", "empty file")
    if file_stat.st_size > limits.max_file_bytes:
        return bad(
            "too_large", f"{file_stat.st_size} bytes > max_file_bytes {limits.max_file_bytes}"
        )
    return _Target(
        candidate.rel_path, candidate.name, path, file_stat.st_size, file_stat.st_mtime_ns,
        file_stat.st_dev, file_stat.st_ino,
    )  # fmt: skip


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISFIFO: "FIFO", stat.S_ISSOCK: "socket", stat.S_ISCHR: "character device",
        stat.S_ISBLK: "block device", stat.S_ISDIR: "directory",
    }  # fmt: skip
    return next((kind for test, kind in kinds.items() if test(mode)), "special file")


# ---------------------------------------------------------------------------- probing


def probe_video(
    path: str, limits: MediaLimits, identity: tuple[int, int] | None = None
) -> ProbeResult:
    """Opens and fully decodes one file. `identity` (st_dev, st_ino) from the stat check must
    still match: a file swapped between the check and the open is refused."""
    try:
        with _open_checked(path, identity) as container:
            order = _stream_order(container)
            if isinstance(order, ProbeFailure):
                return order
            result = _count_frames(container, order[0], limits)
        if isinstance(result, ProbeFailure) or result.num_frames > 1:
            return result
        for stream_index in order[1:]:  # the best stream is a still image: find a moving one
            with _open_checked(path, identity) as container:
                other = _count_frames(container, stream_index, limits)
            if isinstance(other, ProbeFacts) and other.num_frames > 1:
                return other
        return result
    except _FileReplacedError:
        return ProbeFailure("open_invalid", "file replaced during the scan")
    except NotRegularFileError as error:
        return ProbeFailure("not_regular", str(error))
    except MemoryError:
        return ProbeFailure("too_large", "out of memory while decoding")
    except (av.FFmpegError, OSError) as error:
        return ProbeFailure("open_invalid", describe_error(error))


class _FileReplacedError(Exception):
    pass


@contextlib.contextmanager
def _open_checked(path: str, identity: tuple[int, int] | None) -> Iterator[InputContainer]:
    with open_regular_file(path) as file:
        file_stat = os.fstat(file.fileno())
        if identity and (file_stat.st_dev, file_stat.st_ino) != identity:
            raise _FileReplacedError(path)
        with av.open(file) as container:
            yield container


def _stream_order(container: InputContainer) -> list[int] | ProbeFailure:
    """Video streams to try, best first; cover art (attached_pic) never counts."""
    streams = [s for s in container.streams.video if not s.disposition & Disposition.attached_pic]
    if not streams:
        kinds = sorted({s.type for s in container.streams}) or ["no streams"]
        return ProbeFailure("no_video_stream", f"no video stream ({', '.join(kinds)})")
    best = container.streams.best("video")
    streams.sort(key=lambda s: (s is not best, s.index))
    return [s.index for s in streams]


def _count_frames(container: InputContainer, stream_index: int, limits: MediaLimits) -> ProbeResult:
    stream = open_stream(container, stream_index)
    codec_context = stream.codec_context
    width = max(codec_context.width, codec_context.coded_width)
    height = max(codec_context.height, codec_context.coded_height)
    if width * height > limits.max_pixels:
        return _too_many_pixels(width, height, limits)
    counter = _FrameCounter(limits)
    num_packets = 0
    try:
        for packet in container.demux(stream):
            num_packets += packet.size > 0
            for frame in packet.decode():
                failure = counter.add(frame)
                if failure:
                    return failure
    except av.FFmpegError as error:
        detail = f"decoder error after {counter.num_frames} frames: {describe_error(error)}"
        return ProbeFailure("corrupt_frames", detail)
    if not counter.num_frames:
        return ProbeFailure("no_frames", "the stream decodes to no frames")
    if stream.frames and num_packets < stream.frames:  # the container's index promised more
        detail = f"container indexes {stream.frames} packets, the file holds {num_packets}"
        return ProbeFailure("corrupt_frames", f"truncated: {detail}")
    return counter.facts(container, stream)


def _too_many_pixels(width: int, height: int, limits: MediaLimits) -> ProbeFailure:
    detail = f"{width}x{height} = {width * height} pixels > max_pixels {limits.max_pixels}"
    return ProbeFailure("too_large", detail)


@dataclass(frozen=True, slots=True)
class _FirstFrame:
    """What the first decoded frame says about every frame (the frame itself is let go)."""

    width: int
    height: int
    pix_fmt: str
    rotation: int


class _FrameCounter:
    """Collects per-frame facts during the probe's decode and rejects what batches can't use."""

    def __init__(self, limits: MediaLimits) -> None:
        self.limits = limits
        self.pts: list[int | None] = []
        self.keyframe_indices: list[int] = []
        self.first: _FirstFrame | None = None

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    def add(self, frame: av.VideoFrame) -> ProbeFailure | None:
        index = self.num_frames
        if self.first is None:
            if frame.width * frame.height > self.limits.max_pixels:
                return _too_many_pixels(frame.width, frame.height, self.limits)
            rotation = int(frame.rotation or 0)
            self.first = _FirstFrame(frame.width, frame.height, frame.format.name, rotation)
        elif (frame.width, frame.height) != (self.first.width, self.first.height):
            size = f"{self.first.width}x{self.first.height} -> {frame.width}x{frame.height}"
            detail = f"frame size changes mid-stream at frame {index}: {size}"
            return ProbeFailure("corrupt_frames", detail)
        if frame.is_corrupt:
            return ProbeFailure("corrupt_frames", f"frame {index} decoded with errors")
        if index >= self.limits.max_frames:
            detail = f"more than max_frames ({self.limits.max_frames}) frames"
            return ProbeFailure("too_large", detail)
        self.pts.append(frame.pts)
        if frame.key_frame:
            self.keyframe_indices.append(index)
        return None

    def facts(self, container: InputContainer, stream: VideoStream) -> ProbeFacts:
        assert self.first is not None
        frame_pts = tuple(p for p in self.pts if p is not None)
        if len(frame_pts) < self.num_frames:
            frame_pts = ()  # some frames lack pts: index by decode order only
        increasing = all(a < b for a, b in itertools.pairwise(frame_pts))
        seek_off_plan = container.format.flags & (_AVFMT_NOTIMESTAMPS | _AVFMT_TS_DISCONT)
        return ProbeFacts(
            width=self.first.width,
            height=self.first.height,
            num_frames=self.num_frames,
            frame_pts=frame_pts,
            time_base=stream.time_base,
            keyframe_indices=tuple(self.keyframe_indices),
            seekable=bool(frame_pts) and increasing and not seek_off_plan,
            rotation=self.first.rotation,
            codec=stream.codec_context.codec.canonical_name,
            pix_fmt=self.first.pix_fmt,
            stream_index=stream.index,
        )


# ---------------------------------------------------------------------------- worker processes


@dataclass(slots=True)
class _Worker:
    process: subprocess.Popen[bytes]
    jobs: Connection  # parent -> worker
    replies: Connection  # worker -> parent
    started: float
    ready: bool = False
    target: _Target | None = None
    deadline: float = 0.0
    timeout_seconds: float = 0.0


def _probe_files(
    targets: list[_Target], limits: MediaLimits, workers: int
) -> dict[str, ProbeResult]:
    """Probes `targets`, up to `workers` at once, each in a worker process that is killed when
    a probe exceeds limits.decode_timeout_seconds (a hung decoder cannot be interrupted)."""
    if not targets:
        return {}
    pending = deque(targets)
    results: dict[str, ProbeResult] = {}
    pool = [_start_worker() for _ in range(max(1, min(workers, len(targets))))]
    try:
        while pending or any(w.target for w in pool):
            for worker in pool:
                if worker.ready and worker.target is None and pending:
                    _assign(worker, pending.popleft(), limits)
            wait([w.replies for w in pool], _wait_seconds(pool))
            for position, worker in enumerate(pool):
                if not _poll_worker(worker, results):
                    _stop_worker(worker)
                    pool[position] = _start_worker()
    finally:
        for worker in pool:
            _stop_worker(worker)
    return results


def _start_worker() -> _Worker:
    started = start_worker_process(_WORKER_CODE, _worker_env())
    return _Worker(started.process, started.jobs, started.replies, started=time.monotonic())


def _worker_env() -> dict[str, str]:
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    python_path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": python_path}


def _assign(worker: _Worker, target: _Target, limits: MediaLimits) -> None:
    worker.target = target
    worker.timeout_seconds = limits.decode_timeout_seconds
    worker.deadline = time.monotonic() + worker.timeout_seconds
    worker.jobs.send((target.path, limits, (target.device, target.inode)))


def _wait_seconds(pool: list[_Worker]) -> float:
    deadlines = [w.deadline for w in pool if w.target]
    deadlines += [w.started + _WORKER_START_TIMEOUT_SECONDS for w in pool if not w.ready]
    return max(0.0, min(deadlines) - time.monotonic())


def _poll_worker(worker: _Worker, results: dict[str, ProbeResult]) -> bool:
    """Takes a reply if one came; False when the worker died or timed out (replace it)."""
    try:
        if worker.replies.poll():
            message = worker.replies.recv()
            if message == _WORKER_READY:
                worker.ready = True
            elif worker.target:
                results[worker.target.rel_path] = message
                worker.target = None
            return True
    except (EOFError, OSError):
        return _worker_died(worker, results)
    now = time.monotonic()
    if worker.target and now >= worker.deadline:
        detail = f"no result within decode_timeout_seconds ({worker.timeout_seconds} s)"
        results[worker.target.rel_path] = ProbeFailure("decode_timeout", detail, lasting=False)
        return False
    if not worker.ready and now >= worker.started + _WORKER_START_TIMEOUT_SECONDS:
        raise RuntimeError("a probe worker process did not start")
    return True


def _worker_died(worker: _Worker, results: dict[str, ProbeResult]) -> bool:
    exit_code = worker.process.wait()
    if not worker.ready:
        raise RuntimeError(f"a probe worker process failed to start (exit code {exit_code})")
    if worker.target:
        detail = f"the decoder process died (exit code {exit_code})"
        results[worker.target.rel_path] = ProbeFailure("open_invalid", detail, lasting=False)
    return False


def _stop_worker(worker: _Worker) -> None:
    if worker.process.poll() is None and worker.ready and worker.target is None:
        with contextlib.suppress(OSError):
            worker.jobs.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=2.0)
    if worker.process.poll() is None:
        worker.process.kill()
    worker.process.wait()
    worker.jobs.close()
    worker.replies.close()


_WORKER_CODE = (
    "import sys; from sandfs.media.scan import worker_main; "
    "worker_main(int(sys.argv[1]), int(sys.argv[2]))"
)


def worker_main(job_fd: int, reply_fd: int) -> None:
    """The worker process's loop: (path, limits, identity) in, ProbeResult out; None or a
    closed pipe (the parent is gone) ends it."""
    jobs, replies = Connection(job_fd, writable=False), Connection(reply_fd, readable=False)
    replies.send(_WORKER_READY)
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            result = probe_video(*job)
        except Exception as error:  # a reply must always come back
            result = ProbeFailure("open_invalid", f"probe failed: {describe_error(error)}")
        replies.send(result)


# ---------------------------------------------------------------------------- the index


def _index_limits(limits: MediaLimits) -> dict[str, int]:
    """The limits that decide a probe's outcome (a changed one invalidates the index)."""
    return {"max_pixels": limits.max_pixels, "max_frames": limits.max_frames}


def _index_hit(known: dict[str, tuple[dict[str, Any], ProbeResult]], target: _Target) -> bool:
    entry = known.get(target.rel_path)
    return entry is not None and entry[0] == _index_key(target)


def _index_key(target: _Target) -> dict[str, Any]:
    return {"path": target.path, "size_bytes": target.size_bytes, "mtime_ns": target.mtime_ns}


def _load_index(index_path: str | os.PathLike[str], limits: MediaLimits) -> dict[str, Any]:
    """rel_path -> (key, result) from a previous scan; {} when missing, foreign or corrupt."""
    try:
        with open(index_path, encoding="utf-8") as file:
            document = json.load(file)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning(
            "ignoring the scan index %s: %s", ascii(os.fspath(index_path)), ascii(str(error))
        )
        return {}
    try:
        if document["format"] != INDEX_FORMAT or document["scan_version"] != SCAN_VERSION:
            raise ValueError("another format or scan version")
        if document["limits"] != _index_limits(limits):
            log.info("limits changed since the last scan: probing every file again")
            return {}
        return {
            rel_path: _entry_from_json(entry) for rel_path, entry in document["entries"].items()
        }
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        log.warning(
            "ignoring the scan index %s: %s", ascii(os.fspath(index_path)), ascii(repr(error))
        )
        return {}


def _save_index(
    index_path: str | os.PathLike[str],
    limits: MediaLimits,
    targets: list[_Target],
    results: dict[str, ProbeResult],
) -> None:
    entries = {
        t.rel_path: _entry_to_json(_index_key(t), results[t.rel_path])
        for t in targets
        if _is_lasting(results[t.rel_path])
    }
    document = {
        "format": INDEX_FORMAT,
        "scan_version": SCAN_VERSION,
        "limits": _index_limits(limits),
        "entries": entries,
    }
    try:
        _write_atomically(os.fspath(index_path), json.dumps(document, separators=(",", ":")))
    except OSError as error:
        log.warning(
            "cannot write the scan index %s: %s", ascii(os.fspath(index_path)), ascii(str(error))
        )


def _is_lasting(result: ProbeResult) -> bool:
    return isinstance(result, ProbeFacts) or result.lasting


def _write_atomically(path: str, text: str) -> None:
    temp_path = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp_path, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_path, path)
    finally:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _entry_to_json(key: dict[str, Any], result: ProbeResult) -> dict[str, Any]:
    if isinstance(result, ProbeFailure):
        return {**key, "bad": asdict(result)}
    facts = asdict(result)
    facts["frame_pts"] = _encode_runs(result.frame_pts)
    facts["keyframe_indices"] = _encode_runs(result.keyframe_indices)
    facts["time_base"] = None if result.time_base is None else str(result.time_base)
    return {**key, "video": facts}


def _entry_from_json(entry: dict[str, Any]) -> tuple[dict[str, Any], ProbeResult]:
    key = {
        "path": str(entry["path"]),
        "size_bytes": int(entry["size_bytes"]),
        "mtime_ns": int(entry["mtime_ns"]),
    }
    if "bad" in entry:
        return key, ProbeFailure(str(entry["bad"]["reason"]), str(entry["bad"]["detail"]))
    facts = dict(entry["video"])
    time_base = facts["time_base"]
    probe = ProbeFacts(
        width=int(facts["width"]),
        height=int(facts["height"]),
        num_frames=int(facts["num_frames"]),
        frame_pts=_decode_runs(facts["frame_pts"]),
        time_base=None if time_base is None else Fraction(str(time_base)),
        keyframe_indices=_decode_runs(facts["keyframe_indices"]),
        seekable=bool(facts["seekable"]),
        rotation=int(facts["rotation"]),
        codec=str(facts["codec"]),
        pix_fmt=str(facts["pix_fmt"]),
        stream_index=int(facts["stream_index"]),
    )
    if not _consistent(probe):
        raise ValueError(f"inconsistent entry: {probe}")
    return key, probe


def _consistent(facts: ProbeFacts) -> bool:
    """What decoding relies on: one pts per frame (or none), keyframes within range."""
    pts_ok = len(facts.frame_pts) in (0, facts.num_frames) and (
        facts.frame_pts or not facts.seekable
    )
    keyframes = facts.keyframe_indices
    return facts.num_frames > 0 and pts_ok and all(0 <= k < facts.num_frames for k in keyframes)


def _encode_runs(values: tuple[int, ...]) -> list[int]:
    """[first, step, count, step, count, ...]: a constant-rate video's pts fit in 3 numbers."""
    if not values:
        return []
    encoded = [values[0]]
    for step in _steps(values):
        if len(encoded) > 1 and encoded[-2] == step:
            encoded[-1] += 1
        else:
            encoded += [step, 1]
    return encoded


def _steps(values: tuple[int, ...]) -> Iterator[int]:
    return (b - a for a, b in itertools.pairwise(values))


def _decode_runs(encoded: list[int]) -> tuple[int, ...]:
    if not encoded:
        return ()
    values = [int(encoded[0])]
    for position in range(1, len(encoded), 2):
        step, count, last = int(encoded[position]), int(encoded[position + 1]), values[-1]
        values.extend(last + step * k for k in range(1, count + 1))
    return tuple(values)
