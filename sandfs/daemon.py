"""The daemon's spine: set up, mount, `trio.run`, serve until unmounted or signalled, tear down.

The cheap checks run first (FUSE, layout, mountpoint, cache dir), remote datasets are fetched,
then the daemon mounts at once and scans and plans in the running loop (sandfs/startup.py:
meanwhile a path that needs the tasks waits, status.json shows the scan's progress). The scan
runs in a worker thread; its probe processes are fresh interpreters that inherit two pipe ends
only (sandfs/workerproc.py), never /dev/fuse. `pyfuse3.close(unmount=True)` always runs, a
failed startup unmounts before its error is raised, and SIGTERM, SIGINT and SIGHUP end the loop
cleanly (exit 0) even when started as a background job or during the scan.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import pyfuse3
import trio

from sandfs.access import owner_of
from sandfs.cache import ObjectStore
from sandfs.cache.setup import open_store, store_sizing
from sandfs.cache.sizing import StoreSizing
from sandfs.config.limits import check_fd_room
from sandfs.config.schema import TaskConfig
from sandfs.config.settings import MountSettings, usable_cores
from sandfs.errors import DaemonFailed, UserError
from sandfs.fuse.mountpoint import (
    check_fuse_available,
    fuse_options,
    prepare_mountpoint,
    quiet_late_replies,
    replies_release_gil,
)
from sandfs.fuse.operations import SandOperations
from sandfs.media.datasets import DatasetKey, ScanAhead, ScanBad, ScanBook, scan_all
from sandfs.media.scan import StderrProgress
from sandfs.media.scan_workers import ScanStopped
from sandfs.media.types import DatasetScan, ScanProgress
from sandfs.metrics import open_metrics_port, serve_metrics
from sandfs.ops import isolated
from sandfs.plan.build import build_plans, plan_new_task
from sandfs.plan.checkpoint import load_plan_state, save_plan_state
from sandfs.plan.coordination import Coordination
from sandfs.plan.mount import dataset_key, mount_coordination
from sandfs.plan.task import TaskPlan
from sandfs.registration import admit_upload
from sandfs.remote.options import is_remote_url, thaw_options
from sandfs.remote.stats import RemoteStats
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.startup import Startup
from sandfs.stats import Stats

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Mount:
    """What the daemon serves, as set up before mounting."""

    configs: Sequence[TaskConfig]  # remote datasets replaced by their local copies
    settings: MountSettings
    remote: RemoteStats
    resources: contextlib.ExitStack  # closed once unmounted (the object store)
    scan_ahead: ScanAhead | None  # the local datasets' scan, started before the mount


@dataclass(frozen=True, slots=True)
class Planned:
    """What the startup scan makes: the datasets' scans and the tasks' plans."""

    scans: dict[DatasetKey, DatasetScan]
    plans: list[TaskPlan]
    coordination: Coordination  # the mount's: tasks that join later plan with it
    store: ObjectStore
    store_sizing: StoreSizing


def run_daemon(configs: Sequence[TaskConfig], settings: MountSettings,
               on_ready: Callable[[], None], on_stopping: Callable[[], None] = lambda: None,
               scan_ahead: ScanAhead | None = None) -> None:
    """Serve until unmounted or signalled; `on_ready` once the tasks' views serve, `on_stopping`
    once it stops serving (before the unmount). A startup that fails (no usable videos, a
    budget too small, ...) unmounts, then raises its error as if it had failed before mounting.
    The caller has checked the layout and prepared the cache dir (`cli.mount_foreground`), and
    may have started the scan of the local datasets (`scan_ahead`)."""
    check_fuse_available()
    raise_fd_limit()
    check_fd_room(settings.limits, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    # known before the scan: the tasks' directories answer at once while it runs
    owners = {c.task: owner_of(c) for c in configs}
    prepare_mountpoint(settings.mountpoint)
    configs, settings, remote = fetch_remote(configs, settings)
    # every path is absolute by now; a folder a user may write must not stay the daemon's cwd
    os.chdir("/")
    startup = Startup(workers=settings.workers, memory_limit_bytes=settings.memory_limit_bytes,
                      tasks=owners)
    with contextlib.ExitStack() as resources:
        resources.callback(isolated.shutdown)  # the worker processes of out-of-process steps
        mount = Mount(configs, settings, remote, resources, scan_ahead)
        serve_mount(startup, mount, on_ready, on_stopping)
    if startup.failure is not None:
        raise startup.failure


def raise_fd_limit() -> None:
    """The soft RLIMIT_NOFILE up to the hard one: users' handles hold none of the daemon's fds
    (docs/deploy.md#limits), but a scan, the store and the metrics port may want many."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("raising the open-file limit from %d to %d failed: %s", soft, hard, exc)


def fetch_remote(configs: Sequence[TaskConfig], settings: MountSettings
                 ) -> tuple[list[TaskConfig], MountSettings, RemoteStats]:
    """Fetch the remote datasets (s3://, http(s)://) into the cache dir, once; their tasks then
    read the local copies. The copies take their bytes out of the storage budget, so the
    object store never evicts them: fetching again costs network, recomputing only CPU."""
    remote = [c for c in configs if is_remote_url(c.dataset.video_dataset_path)]
    if not remote:
        return list(configs), settings, RemoteStats()
    from sandfs.remote.datasets import RemoteSpec, prepare_remote_datasets  # local data: never

    specs = {c.task: RemoteSpec.of(c.dataset.video_dataset_path,
                                   thaw_options(c.dataset.storage_options), c.dataset.manifest,
                                   c.dataset.extensions) for c in remote}
    copies = prepare_remote_datasets(specs.values(), cache_dir=settings.cache_dir,
                                     budget_bytes=settings.storage_budget_bytes)
    local = [replace(c, dataset=replace(c.dataset, video_dataset_path=copies.root(specs[c.task])))
             if c.task in specs else c for c in configs]
    left = settings.storage_budget_bytes - copies.bytes_on_disk
    return local, replace(settings, storage_budget_bytes=left), copies.stats


def serve_mount(startup: Startup, mount: Mount, on_ready: Callable[[], None],
                on_stopping: Callable[[], None]) -> None:
    mountpoint = mount.settings.mountpoint
    operations = SandOperations(startup, mountpoint, mount.settings.limits)
    quiet_late_replies()
    log.info("pyfuse3 %s: replies %s the GIL", pyfuse3.__version__,
             "release" if replies_release_gil() else "hold")
    settings = mount.settings
    log.info("video jobs run in %s (engine.execution: %s; %d workers, %d usable cores)",
             settings.execution, settings.execution_setting, settings.workers, usable_cores())
    try:
        pyfuse3.init(operations, mountpoint, fuse_options())
    except RuntimeError as exc:
        raise UserError(f"mounting {mountpoint} failed ({exc}); is fuse3 installed "
                        f"and the mountpoint an empty directory you own?") from exc
    log.info("mounted %s; scanning %d dataset(s)", mountpoint,
             len({dataset_key(c) for c in mount.configs}))
    operations.pages.start()  # after the line above: tests time the mount by it
    try:
        trio.run(serve, startup, mount, on_ready, on_stopping)
    finally:
        operations.pages.close()  # its thread calls into the session
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)


async def serve(startup: Startup, mount: Mount, on_ready: Callable[[], None],
                on_stopping: Callable[[], None]) -> None:
    port = mount.settings.metrics_port
    # bound before the scan: a port in use fails the mount
    listeners = [] if port is None else await open_metrics_port(port)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_on_signals, startup, name="signals")
        if listeners:
            nursery.start_soon(serve_metrics, startup.status_for, listeners,
                               mount.settings.limits)
        nursery.start_soon(start_serving, nursery, startup, mount, on_ready, name="startup")
        await pyfuse3.main()
        startup.stop()  # unmounted during the scan: it stops
        on_stopping()
        nursery.cancel_scope.cancel()


async def start_serving(nursery: trio.Nursery, startup: Startup, mount: Mount,
                        on_ready: Callable[[], None]) -> None:
    """Scan and plan in a worker thread, then serve the views. A failure is kept for
    `run_daemon` to raise and ends the mount (its waiters get EIO)."""
    try:
        planned = await trio.to_thread.run_sync(scan_and_plan, startup, mount)
        service = make_service(startup, mount, planned)
        await nursery.start(run_service, startup, service, nursery.cancel_scope)
    except ScanStopped:
        return  # unmounted or signalled meanwhile
    except Exception as exc:
        startup.fail(exc)
        log.info("the mount could not start serving its tasks: unmounting")
        pyfuse3.terminate()
        return
    startup.serve(service)
    log.info("serving %s: %s", mount.settings.mountpoint, ", ".join(
        f"{p.name} ({len(p.videos)} videos, {p.iterations_per_epoch} iterations/epoch)"
        for p in planned.plans))
    on_ready()


async def run_service(startup: Startup, service: ViewService, serving: trio.CancelScope, *,
                      task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The scheduler, until cancelled. An error that leaves it is its own state broken (each
    task's work fails that task alone, inside it): the mount ends cleanly — the reason logged,
    `serving` cancelled with the FUSE loop's requests (a reader waiting for a batch would keep
    `pyfuse3.main` from returning), unmounted, `run_daemon` raising it (exit status 1)."""
    try:
        await service.run(task_status=task_status)
    except Exception as error:
        exc = error
        while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]  # the nurseries' wrapping: the reason is inside
        log.critical("the scheduler failed: %s: %s; unmounting", type(exc).__name__, exc,
                     exc_info=error)
        startup.fail(DaemonFailed(f"the scheduler failed ({type(exc).__name__}: {exc}); "
                                  f"the mount was ended"))
        serving.cancel()


def scan_and_plan(startup: Startup, mount: Mount) -> Planned:
    """In a worker thread: scan every dataset (ScanStopped once `startup.stop_scan` is set),
    plan the tasks, open the object store."""
    settings = mount.settings
    keys = [dataset_key(c) for c in mount.configs]
    startup.scanning(keys)
    # a large dataset takes a while: a progress line on a terminal, one every 10 s in the log
    terminal = StderrProgress(interval_seconds=1.0 if sys.stderr.isatty() else 10.0)

    def progress(key: DatasetKey, done: ScanProgress) -> None:
        terminal(done)
        startup.scanned(key, done)

    ahead = mount.scan_ahead
    scans = {} if ahead is None else ahead.join(progress, startup.stop_scan)
    scans |= scan_all([k for k in keys if k not in scans], settings.cache_dir, settings.workers,
                      settings.media_limits, progress, stop=startup.stop_scan)  # remote copies
    for key in {dataset_key(c) for c in mount.configs if needs_whole_scan(c)}:
        if scans[key].probes is not None:
            scans[key].probes.wait_all(startup.stop_scan)
    startup.enter("planning")
    coordination = mount_coordination(mount.configs, load_plan_state(settings.cache_dir))
    plans = build_plans(mount.configs, scans, settings.k_epochs, coordination)
    sizing = store_sizing(settings)
    store = open_store(settings, plans, sizing)
    mount.resources.callback(store.close)
    return Planned(scans, plans, coordination, store, sizing)


def needs_whole_scan(cfg: TaskConfig) -> bool:
    """A task skipping short videos places only those probed long enough: its mount serves
    once every video is probed (docs/contract.md#lazy-scan)."""
    return cfg.dataset.sampling.short_video == "skip"


def make_service(startup: Startup, mount: Mount, planned: Planned) -> ViewService:
    settings, configs = mount.settings, mount.configs
    return ViewService(
        planned.plans, engine=OnDemandObjects(workers=settings.workers,
                                              memory_budget_bytes=settings.on_demand_memory_bytes),
        stats=Stats(), bad_videos=ScanBad(planned.scans),
        task_texts={c.task: c.source_text for c in configs},
        memory_limit_bytes=settings.batch_memory_bytes, store=planned.store,
        store_sizing=planned.store_sizing, decode_ahead=settings.decode_ahead,
        policy=settings.scheduling, prune_mode=settings.prune_mode,
        checkpoint=partial(save_plan_state, settings.cache_dir),
        task_planner=partial(plan_new_task, settings, ScanBook(
            planned.scans, settings.cache_dir, settings.workers, settings.media_limits),
            planned.coordination),
        admit=partial(admit_upload, settings=settings, config_dir=(
            os.path.dirname(configs[0].source_path) if configs else "") or "/"),
        remote=mount.remote.as_status(), started=startup.started,
        scan_status=startup.scan_status, freezes_windows=True, limits=settings.limits,
        execution=settings.execution, plan_ahead=settings.plan_ahead)


async def stop_on_signals(startup: Startup) -> None:
    # Explicit handlers: a background job inherits SIG_IGN for SIGINT, and SIGTERM's default
    # would leave a dead mount behind.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            startup.stop()  # requests waiting for the scan end first: pyfuse3.main waits for them
            pyfuse3.terminate()
            return
