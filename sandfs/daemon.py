"""The daemon's spine: set up, `trio.run`, serve until unmounted or signalled, tear down.

Setup and teardown sit side by side: the scan runs before anything is mounted (its probe
processes never see /dev/fuse), `pyfuse3.close(unmount=True)` always runs, and SIGTERM, SIGINT
and SIGHUP end the loop cleanly (exit 0) even when started as a background job.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import pyfuse3
import trio

from sandfs.cache.setup import open_store, prepare_cache_dir
from sandfs.config.schema import TaskConfig
from sandfs.config.settings import MountSettings
from sandfs.errors import UserError
from sandfs.fuse.mountpoint import (
    check_fuse_available,
    check_layout,
    fuse_options,
    prepare_mountpoint,
)
from sandfs.fuse.operations import SandOperations
from sandfs.media.datasets import bad_videos, scan_all
from sandfs.media.scan import StderrProgress
from sandfs.metrics import open_metrics_port, serve_metrics
from sandfs.ops import isolated
from sandfs.plan.build import build_plans, plan_new_task
from sandfs.plan.checkpoint import load_plan_state, save_plan_state
from sandfs.plan.mount import dataset_key
from sandfs.plan.task import TaskPlan
from sandfs.remote import RemoteSpec, RemoteStats, is_remote_url, prepare_remote_datasets
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats

log = logging.getLogger(__name__)


def run_daemon(configs: Sequence[TaskConfig], settings: MountSettings,
               on_ready: Callable[[], None], on_stopping: Callable[[], None] = lambda: None,
               ) -> None:
    """Serve until unmounted or signalled; `on_ready` once the mount serves, `on_stopping` once
    it stops serving (before the unmount)."""
    check_fuse_available()
    check_layout(settings.mountpoint, settings.cache_dir,
                 [c.dataset.video_dataset_path for c in configs])
    prepare_mountpoint(settings.mountpoint)  # fail fast, before a long scan
    prepare_cache_dir(settings.cache_dir)
    configs, settings, remote = fetch_remote(configs, settings)
    # a large dataset takes a while: a progress line on a terminal, one every 10 s in the log
    progress = StderrProgress(interval_seconds=1.0 if sys.stderr.isatty() else 10.0)
    scans = scan_all([dataset_key(c) for c in configs], settings.cache_dir, settings.workers,
                     settings.media_limits, progress)
    plans = build_plans(configs, scans, settings.k_epochs, load_plan_state(settings.cache_dir))
    store = open_store(settings, plans)
    try:
        service = ViewService(
            plans, engine=OnDemandObjects(workers=settings.workers,
                                          memory_budget_bytes=settings.on_demand_memory_bytes),
            stats=Stats(), bad_videos=bad_videos(scans),
            task_texts={c.task: c.source_text for c in configs},
            memory_limit_bytes=settings.batch_memory_bytes, store=store,
            decode_ahead=settings.decode_ahead,
            policy=settings.scheduling, prune_mode=settings.prune_mode,
            checkpoint=partial(save_plan_state, settings.cache_dir),
            task_planner=partial(plan_new_task, settings, scans, plans),
            config_dir=os.path.dirname(configs[0].source_path) or "/",
            remote=remote.as_status())
        serve_mount(service, plans, settings.mountpoint, on_ready, on_stopping,
                    settings.metrics_port)
    finally:
        isolated.shutdown()  # the worker processes of out-of-process custom steps
        store.close()


def fetch_remote(configs: Sequence[TaskConfig], settings: MountSettings
                 ) -> tuple[list[TaskConfig], MountSettings, RemoteStats]:
    """Fetch the remote datasets (s3://, http(s)://) into the cache dir, once; their tasks then
    read the local copies. The copies take their bytes out of the storage budget, so the
    object store never evicts them: fetching again costs network, recomputing only CPU."""
    specs = {c.task: RemoteSpec.of(c.dataset.video_dataset_path, dict(c.dataset.storage_options),
                                   c.dataset.manifest, c.dataset.extensions)
             for c in configs if is_remote_url(c.dataset.video_dataset_path)}
    if not specs:
        return list(configs), settings, RemoteStats()
    copies = prepare_remote_datasets(specs.values(), cache_dir=settings.cache_dir,
                                     budget_bytes=settings.storage_budget_bytes)
    local = [replace(c, dataset=replace(c.dataset, video_dataset_path=copies.root(specs[c.task])))
             if c.task in specs else c for c in configs]
    left = settings.storage_budget_bytes - copies.bytes_on_disk
    return local, replace(settings, storage_budget_bytes=left), copies.stats


def serve_mount(service: ViewService, plans: Sequence[TaskPlan], mountpoint: str,
                on_ready: Callable[[], None], on_stopping: Callable[[], None],
                metrics_port: int | None = None) -> None:
    try:
        pyfuse3.init(SandOperations(service, mountpoint), mountpoint, fuse_options())
    except RuntimeError as exc:
        raise UserError(f"mounting {mountpoint} failed ({exc}); is fuse3 installed "
                        f"and the mountpoint an empty directory you own?") from exc
    log.info("mounted %s: %s", mountpoint,
             ", ".join(f"{p.name} ({len(p.videos)} videos, {p.iterations_per_epoch} "
                       f"iterations/epoch)" for p in plans))
    try:
        trio.run(serve, service, on_ready, on_stopping, metrics_port)
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)


async def serve(service: ViewService, on_ready: Callable[[], None],
                on_stopping: Callable[[], None], metrics_port: int | None = None) -> None:
    # bound before on_ready: a port in use fails the mount
    listeners = [] if metrics_port is None else await open_metrics_port(metrics_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        if listeners:
            nursery.start_soon(serve_metrics, service.status_for, listeners)
        nursery.start_soon(stop_on_signals, name="signals")
        on_ready()
        await pyfuse3.main()
        on_stopping()
        nursery.cancel_scope.cancel()


async def stop_on_signals() -> None:
    # Explicit handlers: a background job inherits SIG_IGN for SIGINT, and SIGTERM's default
    # would leave a dead mount behind.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("signal %s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
            return
