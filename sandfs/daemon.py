"""The daemon: scan, plan, mount, serve until unmounted or signalled. The one `trio.run`.

Setup and teardown sit side by side: the scan runs before anything is mounted (its probe
processes never see /dev/fuse), `pyfuse3.close(unmount=True)` always runs, and SIGTERM, SIGINT
and SIGHUP end the loop cleanly (exit 0) even when started as a background job.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import logging
import os
import signal
import stat
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import pyfuse3
import trio

from sandfs.cache import CacheDirError, ObjectStore, StoreBusyError
from sandfs.config.schema import EngineConfig, TaskConfig
from sandfs.engine import ObjectEngine
from sandfs.errors import UserError
from sandfs.fuse.operations import SandOperations
from sandfs.media.scan import scan_dataset
from sandfs.media.types import BadVideo, DatasetScan, MediaLimits
from sandfs.plan.coordination import STATE_VERSION
from sandfs.plan.mount import plan_tasks
from sandfs.plan.task import TaskPlan
from sandfs.service import ViewService
from sandfs.stats import Stats

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MountSettings:
    mountpoint: str
    cache_dir: str
    workers: int
    k_epochs: int
    decode_ahead: int
    memory_budget_bytes: int
    storage_budget_bytes: int | None  # None: a default from the free space (see open_store)
    cache_format: str


def settings_from(engine: EngineConfig, mountpoint: str | None) -> MountSettings:
    mountpoint = mountpoint or engine.mountpoint
    if not mountpoint:
        raise UserError("no mountpoint: give one on the command line or as engine.mountpoint")
    mountpoint = os.path.abspath(mountpoint)
    cache_dir = engine.cache_dir or default_cache_dir(mountpoint)
    return MountSettings(
        mountpoint=mountpoint,
        cache_dir=os.path.abspath(cache_dir),
        workers=engine.workers or os.cpu_count() or 2,
        k_epochs=engine.k_epochs,
        decode_ahead=engine.decode_ahead,
        memory_budget_bytes=engine.memory_limit_bytes or default_memory_budget(),
        storage_budget_bytes=engine.storage_budget_bytes,
        cache_format=engine.cache_format,
    )


def default_cache_dir(mountpoint: str) -> str:
    tag = hashlib.sha1(mountpoint.encode()).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "sandfs", tag)


def default_memory_budget() -> int:
    """Finished views kept in memory: a quarter of RAM, at most 4 GiB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(total // 4, 4 << 30)


# -- preparing ------------------------------------------------------------------------------


def prepare_cache_dir(path: str) -> None:
    """Create it 0700; refuse one another user owns or anyone may write (symlink attacks)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"cache dir {path} is not a directory")
    if info.st_uid != os.getuid():
        raise UserError(f"cache dir {path} belongs to uid {info.st_uid}, not to you")
    if info.st_mode & 0o022:
        raise UserError(f"cache dir {path} is writable by others (mode {info.st_mode & 0o777:o}); "
                        f"chmod 700 it")
    for pattern in ("scan-*.tmp", f"{PLAN_STATE}.*.tmp"):
        for leftover in glob.glob(os.path.join(glob.escape(path), pattern)):
            os.unlink(leftover)  # a write interrupted by a kill


def scan_all(
    configs: Sequence[TaskConfig], cache_dir: str | None, workers: int
) -> dict[tuple, DatasetScan]:
    """One scan per (dataset root, extensions); unchanged files come from the scan index (kept
    in `cache_dir`; None: no index)."""
    scans: dict[tuple, DatasetScan] = {}
    for cfg in configs:
        key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
        if key in scans:
            continue
        tag = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        scans[key] = scan_dataset(
            key[0], key[1], limits=MediaLimits.from_env(), workers=workers,
            index_path=os.path.join(cache_dir, f"scan-{tag}.json") if cache_dir else None,
        )
        found = scans[key]
        log.info("dataset %s: %d usable videos, %d left out", key[0], len(found.videos),
                 len(found.bad))
    return scans


PLAN_STATE = "plan-state.json"


def load_plan_state(cache_dir: str) -> dict | None:
    """The coordination checkpoint of the last run, if any (a broken one is ignored)."""
    path = os.path.join(cache_dir, PLAN_STATE)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"version {state.get('version')!r}, this sandfs plans with "
                             f"version {STATE_VERSION}")
        return state
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the plan checkpoint %s: %s", path, exc)
        return None


def save_plan_state(cache_dir: str, state: dict) -> None:
    """Atomically: temp file, fsync, rename."""
    path = os.path.join(cache_dir, PLAN_STATE)
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def build_plans(configs: Sequence[TaskConfig], scans: dict[tuple, DatasetScan],
                k_epochs: int, frozen_state: dict | None = None) -> list[TaskPlan]:
    plans = plan_tasks(configs, scans, k_epochs=k_epochs, frozen_state=frozen_state)
    for cfg, plan in zip(configs, plans, strict=True):
        check_plan(cfg, plan)
    return plans


def check_plan(cfg: TaskConfig, plan: TaskPlan) -> None:
    if not plan.videos:
        raise UserError(f"{cfg.source_path}: task {cfg.task}: no usable videos in "
                        f"{cfg.dataset.video_dataset_path} (see the log for files left out)")
    if plan.iterations_per_epoch == 0:
        raise UserError(
            f"{cfg.source_path}: task {cfg.task}: {len(plan.videos)} usable videos are fewer "
            f"than videos_per_batch={cfg.dataset.sampling.videos_per_batch} with drop_last: "
            f"an epoch would be empty")


def bad_videos(scans: dict[tuple, DatasetScan]) -> list[BadVideo]:
    return [b for found in scans.values() for b in found.bad]


def default_storage_budget(cache_dir: str) -> int:
    """A quarter of the free space where the cache lives, at most 64 GiB."""
    info = os.statvfs(cache_dir)
    return max(1 << 20, min(info.f_bavail * info.f_frsize // 4, 64 << 30))


def open_store(settings: MountSettings, plans: Sequence[TaskPlan]) -> ObjectStore:
    budget = settings.storage_budget_bytes or default_storage_budget(settings.cache_dir)
    biggest = max(p.view_nbytes(0, 0) for p in plans)
    if budget < biggest:
        raise UserError(f"storage budget {budget} bytes is smaller than one batch ({biggest} "
                        f"bytes); raise --budget / engine.storage_budget")
    fmt = None if settings.cache_format == "auto" else settings.cache_format
    store = ObjectStore(os.path.join(settings.cache_dir, "store"), budget, default_fmt=fmt)
    try:
        report = store.open()
    except StoreBusyError as exc:
        raise UserError(f"cache dir {settings.cache_dir} is in use by another sandfs daemon; "
                        f"give this mount its own --cache-dir") from exc
    except CacheDirError as exc:
        raise UserError(str(exc)) from exc
    if report.corrupt_removed or report.temp_removed:
        log.warning("cache: removed %d corrupt objects and %d partial writes left by a crash",
                    report.corrupt_removed, report.temp_removed)
    return store


def plan_new_task(settings: MountSettings, scans: dict[tuple, DatasetScan],
                  plans: Sequence[TaskPlan], cfg: TaskConfig, mount_epoch: int) -> TaskPlan:
    """In a worker thread: scan the task's dataset if it is new, and plan it with the others,
    its epoch 0 at `mount_epoch` (where the leading task on its dataset stands)."""
    key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    if key not in scans:
        scans.update(scan_all([cfg], settings.cache_dir, settings.workers))
    found = scans[key]
    coordination = plans[0].coordination
    coordination.join(cfg, mount_epoch)
    plan = TaskPlan(cfg, found.videos, k_epochs=settings.k_epochs,
                    all_rel_paths=[b.rel_path for b in found.bad], coordination=coordination)
    try:
        check_plan(cfg, plan)
    except UserError:
        coordination.remove(cfg.task)
        raise
    return plan


# -- the mountpoint -------------------------------------------------------------------------


def prepare_mountpoint(path: str) -> None:
    """Create it if missing, clean a stale mount left by a killed daemon, refuse a live one."""
    try:
        os.stat(path)
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):
            raise UserError(f"mountpoint {path}: {exc.strerror}") from exc
        clean_stale_mount(path)
        return
    if os.path.ismount(path):
        raise UserError(f"mountpoint {path} is busy: something is already mounted there "
                        f"(run: sandfs unmount {path})")
    if not os.path.isdir(path):
        raise UserError(f"mountpoint {path} is not a directory")


def clean_stale_mount(path: str) -> None:
    log.warning("mountpoint %s: stale mount of a dead daemon; unmounting it", path)
    for flags in (["-u"], ["-uz"]):
        done = subprocess.run(["fusermount3", *flags, path], capture_output=True, text=True)
        if done.returncode == 0:
            return
    raise UserError(f"mountpoint {path}: stale mount could not be removed "
                    f"({done.stderr.strip()}); run: fusermount3 -uz {path}")


def fuse_options() -> set[str]:
    options = set(pyfuse3.default_options)  # default_permissions: the kernel checks modes
    options |= {"fsname=sandfs", "subtype=sandfs"}
    if os.getuid() == 0 or user_allow_other():
        options.add("allow_other")  # trainers often run as another user than the daemon
    return options


def user_allow_other() -> bool:
    try:
        with open("/etc/fuse.conf") as f:
            return any(line.strip() == "user_allow_other" for line in f)
    except OSError:
        return False


def check_fuse_available() -> None:
    if not os.path.exists("/dev/fuse"):
        raise UserError("FUSE is not available: /dev/fuse is missing (install fuse3; in a "
                        "container add --device /dev/fuse --cap-add SYS_ADMIN)")
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        raise UserError(f"FUSE is not available: cannot open /dev/fuse ({exc.strerror})") from exc


# -- serving --------------------------------------------------------------------------------


async def serve(service: ViewService, on_ready: Callable[[], None]) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        nursery.start_soon(stop_on_signals, name="signals")
        on_ready()
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def stop_on_signals() -> None:
    # Explicit handlers: a background job inherits SIG_IGN for SIGINT, and SIGTERM's default
    # would leave a dead mount behind.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
            return


def run_daemon(configs: Sequence[TaskConfig], settings: MountSettings,
               on_ready: Callable[[], None]) -> None:
    check_fuse_available()
    prepare_mountpoint(settings.mountpoint)  # fail fast, before a long scan
    prepare_cache_dir(settings.cache_dir)
    scans = scan_all(configs, settings.cache_dir, settings.workers)
    plans = build_plans(configs, scans, settings.k_epochs, load_plan_state(settings.cache_dir))
    store = open_store(settings, plans)
    try:
        serve_mount(configs, settings, plans, scans, store, on_ready)
    finally:
        store.close()


def serve_mount(configs, settings: MountSettings, plans, scans, store: ObjectStore,
                on_ready: Callable[[], None]) -> None:
    # The engine's on-demand objects get a quarter of the memory, prepared batches the rest.
    engine = ObjectEngine(workers=settings.workers,
                          memory_budget_bytes=settings.memory_budget_bytes // 4)
    service = ViewService(plans, engine=engine, stats=Stats(), bad_videos=bad_videos(scans),
                          task_texts={c.task: c.source_text for c in configs},
                          memory_limit_bytes=settings.memory_budget_bytes * 3 // 4, store=store,
                          decode_ahead=settings.decode_ahead,
                          checkpoint=partial(save_plan_state, settings.cache_dir),
                          task_planner=partial(plan_new_task, settings, scans, plans),
                          config_dir=os.path.dirname(configs[0].source_path) or "/")
    operations = SandOperations(service, settings.mountpoint)
    try:
        pyfuse3.init(operations, settings.mountpoint, fuse_options())
    except RuntimeError as exc:
        raise UserError(f"mounting {settings.mountpoint} failed ({exc}); is fuse3 installed "
                        f"and the mountpoint an empty directory you own?") from exc
    log.info("mounted %s: %s", settings.mountpoint,
             ", ".join(f"{p.name} ({len(p.videos)} videos, {p.iterations_per_epoch} "
                       f"iterations/epoch)" for p in plans))
    try:
        trio.run(serve, service, on_ready)
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", settings.mountpoint)
