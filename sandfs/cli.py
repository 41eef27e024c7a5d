"""The `sandfs` command. User errors become one line on stderr and a non-zero exit status:
2 for a bad config or command line, 1 for anything else the user can fix."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sandfs import __version__
from sandfs.config.schema import TaskConfig
from sandfs.config.yamlsafe import ConfigError
from sandfs.distribution import DISTRIBUTION, foreign_sandfs
from sandfs.errors import UserError
from sandfs.mounttable import is_mounted
from sandfs.pids import wait_for_exit
from sandfs.readiness import Readiness
from sandfs.runtime import (
    keep_freed_memory,
    limit_malloc_arenas,
    quick_gil_turns,
    settle_collector,
)

if TYPE_CHECKING:  # imported where used: it loads the ops registry (numpy, OpenCV)
    from sandfs.config.settings import MountSettings

log = logging.getLogger("sandfs")


class BadArgument(UserError):
    """A bad command line value or mount setting: exit status 2, like a bad config."""


@contextlib.contextmanager
def settings_check():
    """The settings' UserErrors (a flag, variable or engine value at fault) as BadArgument."""
    try:
        yield
    except BadArgument:
        raise
    except UserError as exc:
        raise BadArgument(str(exc)) from None


def seconds(text: str) -> float:
    """A --timeout: a number of seconds > 0 (argparse makes a bad one exit status 2)."""
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandfs", description=__doc__.split(".")[0])
    parser.add_argument("--version", action="version",
                        version=f"sandfs {__version__} ({DISTRIBUTION})")
    sub = parser.add_subparsers(dest="command", required=True)

    mount = sub.add_parser("mount", help="mount the views of one or more tasks")
    mount.add_argument("mountpoint", nargs="?", help="default: the config's engine.mountpoint")
    mount.add_argument("--config", action="append", default=[], metavar="TASK.yaml",
                       help="a task to serve from the start; repeat it for more. Without any, "
                            "the mount serves the tasks that join it (sandfs task add, "
                            "sandfs.torch.join_task, sandfs.ray)")
    mount.add_argument("--cache-dir")
    mount.add_argument("--budget", metavar="SIZE",
                       help="storage budget, e.g. 200G (default: the store sizes itself, "
                       "within a quarter of the free disk)")
    mount.add_argument("--memory-limit", metavar="SIZE",
                       help="memory for prepared batches and decoding, e.g. 8G (default: what "
                            "the tasks need; a quarter of RAM for a mount without tasks)")
    mount.add_argument("--k-epochs", type=int, metavar="K")
    mount.add_argument("--decode-ahead", type=int, metavar="N",
                       help="later windows a decode pass also prepares frames for (default 3)")
    mount.add_argument("--workers", metavar="N", help="worker threads, or auto")
    mount.add_argument("--execution", metavar="WHERE",
                       help="where video jobs decode and augment: threads (the daemon's), "
                            "processes (worker processes) or auto (the default: processes "
                            "where there are cores enough, docs/config.md)")
    mount.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="also serve GET /metrics on 127.0.0.1:PORT (Prometheus)")
    mount.add_argument("--limit", action="append", metavar="NAME=N",
                       help="a per-user or total bound, e.g. handles_per_uid=256 "
                            "(docs/deploy.md#limits; repeat for several)")
    mount.add_argument("--foreground", action="store_true",
                       help="stay attached (tests, systemd: READY=1 to $NOTIFY_SOCKET)")
    mount.add_argument("--log-level", default="INFO", type=str.upper,
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    mount.add_argument("--ready-fd", type=int, metavar="N",
                       help="write 'ready\\n' to fd N once the mount serves, "
                            "or 'error: ...\\n'")

    unmount = sub.add_parser("unmount", help="unmount cleanly and wait for the daemon")
    unmount.add_argument("mountpoint")
    unmount.add_argument("--timeout", type=seconds, default=30.0, help="seconds to wait")

    status = sub.add_parser("status", help="live figures of a mount")
    status.add_argument("mountpoint")
    status.add_argument("--json", action="store_true")
    status.add_argument("--timeout", type=seconds, default=10.0,
                        help="seconds to wait for the daemon's answer")
    status.add_argument("--watch", action="store_true",
                        help="a live table, redrawn every --interval seconds (Ctrl-C ends it)")
    status.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    status.add_argument("--iterations", type=int, metavar="N",
                        help="with --watch: stop after N refreshes")
    task = sub.add_parser("task", help="register or end a task on a live mount")
    task_sub = task.add_subparsers(dest="task_command", required=True)
    add = task_sub.add_parser("add", help="register TASK.yaml (its views are planned at once)")
    add.add_argument("mountpoint")
    add.add_argument("config", metavar="TASK.yaml")
    remove = task_sub.add_parser("remove", help="end a task and release its objects")
    remove.add_argument("mountpoint")
    remove.add_argument("name")

    plan = sub.add_parser("plan", help="dry run: what the merged plan does, without mounting")
    plan.add_argument("--config", action="append", required=True, metavar="TASK.yaml")
    plan.add_argument("--epochs", type=int, help="how many epochs to plan (default: one window)")
    plan.add_argument("--k-epochs", type=int, metavar="K")
    plan.add_argument("--cache-dir", help="where the scan index is kept (default: none)")
    plan.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (clash := foreign_sandfs()) is not None:
        print(f"sandfs: {clash}", file=sys.stderr)
        return 1
    try:
        commands = {"mount": cmd_mount, "unmount": cmd_unmount, "status": cmd_status,
                    "plan": cmd_plan, "task": cmd_task}
        return commands[args.command](args)
    except (ConfigError, BadArgument) as exc:
        print(f"sandfs: {exc}", file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"sandfs: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `sandfs plan --json | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# -- mount ----------------------------------------------------------------------------------


def engine_overrides(args: argparse.Namespace) -> dict:
    """The command line's engine values, as typed (settings.py checks them)."""
    return {
        "cache_dir": args.cache_dir,
        "storage_budget_bytes": args.budget,
        "memory_limit_bytes": args.memory_limit,
        "k_epochs": args.k_epochs,
        "decode_ahead": args.decode_ahead,
        "workers": args.workers,  # "auto" given on the command line wins over a config's number
        "execution": args.execution,
        "metrics_port": args.metrics_port,
        "limits": args.limit,
    }


def cmd_mount(args: argparse.Namespace) -> int:
    if not args.foreground:
        return mount_background(*mount_configs(args), args)
    # the scan's worker interpreter starts first, on the other core, while this one loads the
    # configs (numpy and OpenCV: 0.1 s) and imports the daemon
    with probes_ahead() as probes:
        return mount_foreground(*mount_configs(args), args, probes)


def mount_configs(args: argparse.Namespace
                  ) -> tuple[list[TaskConfig], MountSettings, list[str]]:
    """The tasks' configs, checked as every task joining a mount is (`sandfs.registration`),
    the mount's settings and their warnings."""
    from sandfs.config.settings import mount_settings
    from sandfs.registration import check_task, load_mount_configs

    configs = load_mount_configs(args.config)
    with settings_check():
        settings, warnings = mount_settings(configs, engine_overrides(args), args.mountpoint)
    for config in configs:
        check_task(config, settings, live=False)
    return configs, settings, warnings


def probes_ahead():
    """The scan's probe worker, started now (a fresh interpreter: 0.07 s); leaving the `with`
    block stops what the scan did not take."""
    from sandfs.media.scan_workers import WORKERS_AHEAD, ProbeWorkers

    return ProbeWorkers(WORKERS_AHEAD)


def mount_foreground(configs, settings, warnings, args, probes) -> int:
    limit_malloc_arenas()  # before the daemon starts its threads
    keep_freed_memory()
    quick_gil_turns()
    setup_logging(args.log_level)
    for warning in warnings:
        log.warning("%s", warning)
    readiness = Readiness(os.environ.get("NOTIFY_SOCKET"), args.ready_fd)
    status = (f"serving {settings.mountpoint}: "
              f"{', '.join(c.task for c in configs) or 'no task yet (tasks join it)'}")
    try:
        # the scan runs in a thread, its probes in the worker started ahead, while this one
        # imports and mounts
        with scan_ahead(configs, settings, probes) as ahead:
            from sandfs.daemon import run_daemon

            settle_collector()
            run_daemon(configs, settings, lambda: readiness.ready(status), readiness.stopping,
                       ahead)
    except UserError as exc:
        readiness.failed(str(exc))
        raise
    return 0


def scan_ahead(configs, settings, probes):
    """The cache dir prepared (the scan keeps its index there), the scan of the local datasets
    started (`ScanAhead`); remote ones are fetched by the daemon."""
    from sandfs.cache.setup import prepare_cache_dir
    from sandfs.media.datasets import ScanAhead
    from sandfs.plan.mount import dataset_key
    from sandfs.remote.options import is_remote_url

    prepare_cache_dir(settings.cache_dir)
    local = [dataset_key(c) for c in configs if not is_remote_url(c.dataset.video_dataset_path)]
    return ScanAhead(local, settings.cache_dir, settings.workers, settings.media_limits, probes,
                     settings.scan_pace)


def mount_background(configs, settings, warnings, args: argparse.Namespace) -> int:
    """Start the daemon detached and return once it serves (or print why it could not)."""
    from sandfs.cache.setup import LOG_NAME, check_cache_dir, open_log

    check_cache_dir(settings.cache_dir)  # before anything is written in it
    log_path = os.path.join(settings.cache_dir, LOG_NAME)
    log_fd = open_log(settings.cache_dir)
    read_fd, write_fd = os.pipe()
    # forked, not exec'd: the configs are loaded and checked already, and a fresh interpreter
    # would cost the user another half second of imports before the scan starts
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_detached(configs, settings, args, warnings, log_fd, write_fd)  # never returns
    os.close(log_fd)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        answer = pipe.read().decode(errors="replace").strip()
    forward = Readiness(None, args.ready_fd)  # the caller's own --ready-fd, if any
    if answer == "ready":
        print(f"sandfs: mounted {settings.mountpoint} (pid {pid}, log {log_path})")
        forward.ready("")
        return 0
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    message = answer.removeprefix("error: ") or f"the daemon exited with status {code}"
    forward.failed(message)
    raise UserError(f"{message} (log: {log_path})")


def run_detached(configs, settings, args: argparse.Namespace, warnings, log_fd: int,
                 ready_fd: int):
    """The forked daemon: its own session, stdin from /dev/null, output to the log, no fd of
    the caller's kept open (a caller reading our stdout to its end must not wait on the
    daemon), and never back into the caller's code: it leaves with os._exit."""
    code = 1
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, ready_fd)
        os.closerange(ready_fd + 1, os.sysconf("SC_OPEN_MAX"))
        # the detached daemon is not the service's main process: it answers on the fd only
        os.environ.pop("NOTIFY_SOCKET", None)
        args.ready_fd, args.foreground = ready_fd, True
        with probes_ahead() as probes:  # the daemon's own children
            code = mount_foreground(configs, settings, warnings, args, probes)
    except UserError as exc:
        print(f"sandfs: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # a forked child must never return into the CLI
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# -- unmount and status ---------------------------------------------------------------------


# The status file is read by a child process: a hung daemon leaves a read waiting forever, and
# only a process can be killed out of that wait.
STATUS_READER = """
import sys
try:
    with open(sys.argv[1], "rb") as f:
        sys.stdout.buffer.write(f.read())
except OSError as exc:
    sys.stderr.write(f"{exc.errno} {exc.strerror}")
    sys.exit(3)
"""


class NotAnswering(UserError):
    """The daemon is there but did not answer in time (hung, stopped or very busy)."""


def read_status(mountpoint: str, timeout: float = 10.0) -> dict:
    path = os.path.join(mountpoint, ".sand", "status.json")
    try:
        done = subprocess.run([sys.executable, "-S", "-c", STATUS_READER, path],
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NotAnswering(f"{mountpoint}: the sandfs daemon did not answer within {timeout:g}s "
                        f"(hung or stopped?)") from None
    if done.returncode == 0:
        return json.loads(done.stdout)
    number, _, reason = done.stderr.decode(errors="replace").partition(" ")
    if number in (str(errno.ENOTCONN), str(errno.ECONNABORTED)):
        raise UserError(f"{mountpoint}: the sandfs daemon is gone (stale mount); "
                        f"run: sandfs unmount {mountpoint}")
    raise UserError(f"{mountpoint} is not a sandfs mount ({reason or 'no status file'})")


def cmd_unmount(args: argparse.Namespace) -> int:
    mountpoint = os.path.abspath(args.mountpoint)
    if not is_mounted(mountpoint):
        raise UserError(f"{mountpoint} is not mounted")
    deadline = time.monotonic() + args.timeout
    try:  # half the time at most: a hung daemon must leave time for fusermount3
        pid = read_status(mountpoint, args.timeout / 2).get("pid")
    except UserError:
        pid = None  # stale, hung or foreign: fusermount3 still cleans it
    try:
        done = subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True, text=True,
                              timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise UserError(f"cannot unmount {mountpoint}: no answer within {args.timeout:g}s; "
                        f"detach it with: fusermount3 -uz {mountpoint}") from None
    if done.returncode != 0:
        reason = done.stderr.strip() or f"fusermount3 exited {done.returncode}"
        raise UserError(f"cannot unmount {mountpoint}: {reason} (if files are still open: "
                        f"fusermount3 -uz {mountpoint})")
    if pid and not wait_for_exit(pid, deadline):
        raise UserError(f"unmounted {mountpoint}, but daemon pid {pid} is still running after "
                        f"{args.timeout:g}s")
    print(f"sandfs: unmounted {mountpoint}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    mountpoint = os.path.abspath(args.mountpoint)
    if args.watch:
        return watch_status(mountpoint, args)
    status = read_status(mountpoint, args.timeout)
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    print(format_status(status))
    return 0


def watch_status(mountpoint: str, args: argparse.Namespace) -> int:
    from sandfs.watch import watch

    if args.interval <= 0 or (args.iterations is not None and args.iterations < 1):
        raise BadArgument("--interval must be > 0 and --iterations >= 1")
    # a hung daemon must not freeze the screen for long: it shows as "not answering"
    timeout = min(args.timeout, max(2.0, 2 * args.interval))
    # a clear error first when it is not a sandfs mount or its daemon is gone; a daemon that
    # does not answer is shown in the table until it does
    with contextlib.suppress(NotAnswering):
        read_status(mountpoint, timeout)
    return watch(mountpoint, lambda: read_status(mountpoint, timeout), args.interval,
                 args.iterations)


def format_status(status: dict) -> str:
    lines = [f"sandfs pid {status['pid']}, up {status['uptime_seconds']:.0f}s, "
             f"{status['workers']} workers, {status['memory_bytes'] / 2**20:.1f} MiB of views in "
             f"memory"]
    scan = status.get("scan", {})
    if scan.get("phase", "ready") != "ready":  # the tasks serve once the datasets are scanned
        lines.append(f"  {scan['phase']}: {scan['videos_scanned']}/"
                     f"{scan['videos_total'] if scan['videos_total'] is not None else '?'} "
                     f"videos, {scan['seconds']:.0f}s")
    for name, task in status["tasks"].items():
        lines.append(f"  task {name}: epoch {task['epoch']} iteration {task['iteration']}, "
                     f"{task['ready_ahead']} ready ahead, {task['views_served']} views served, "
                     f"reads waited {task['stall_seconds']:.2f}s")
    decoded, independent = status["frames_decoded"], status["frames_decoded_independent"]
    lines.append(f"  frames decoded {decoded} (independent decoding: {independent}), "
                 f"views materialized {status['views_materialized']}")
    for bad in status["bad_videos"]:
        lines.append(f"  left out: {bad['path']!r}: {bad['reason']}")
    return "\n".join(lines)


# -- task add / remove ---------------------------------------------------------------------


def cmd_task(args: argparse.Namespace) -> int:
    from sandfs.config.loader import load_task_configs

    mountpoint = os.path.abspath(args.mountpoint)
    # a bad file is a bad config (exit status 2) whether or not the mount is live
    cfg = load_task_configs([args.config])[0] if args.task_command == "add" else None
    read_status(mountpoint)  # a clear error when it is not a live sandfs mount
    if cfg is not None:
        return task_add(mountpoint, args.config, cfg)
    return task_remove(os.path.join(mountpoint, ".sand", "tasks"), args.name)


def task_add(mountpoint: str, config_path: str, cfg: TaskConfig) -> int:
    """`cfg`: the file loaded, its own errors with its line numbers; the daemon checks it
    against the mount (`sandfs.registration`)."""
    from sandfs.registration import upload_task
    from sandfs.tasks import ignored_engine_note

    with open(config_path, encoding="utf-8") as f:
        text = f.read()
    upload_task(mountpoint, cfg.task, text, os.path.dirname(os.path.abspath(config_path)),
                read_status)
    if note := ignored_engine_note(cfg):
        print(f"sandfs: {note}", file=sys.stderr)
    print(f"sandfs: task {cfg.task} registered")
    return 0


def task_remove(tasks_dir: str, name: str) -> int:
    try:
        os.unlink(os.path.join(tasks_dir, f"{name}.yaml"))
    except FileNotFoundError as exc:
        raise UserError(f"no task {name!r} on this mount") from exc
    print(f"sandfs: task {name} ended")
    return 0


# -- plan -----------------------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    from sandfs.cache.setup import check_cache_dir
    from sandfs.config.loader import load_task_configs
    from sandfs.config.settings import cli_engine, default_workers, media_limits
    from sandfs.media.datasets import scan_all
    from sandfs.plan.build import build_plans
    from sandfs.plan.mount import dataset_key
    from sandfs.plan.report import format_plan, plan_report
    from sandfs.remote.options import is_remote_url

    configs = load_task_configs(args.config)
    remote = [c.dataset.video_dataset_path for c in configs
              if is_remote_url(c.dataset.video_dataset_path)]
    if remote:
        raise UserError(f"sandfs plan reads local datasets only; {remote[0]} is fetched by "
                        f"sandfs mount (then plan its copy under CACHE_DIR/remote/)")
    with settings_check():
        engine, _ = cli_engine(configs, {"k_epochs": args.k_epochs})
        limits = media_limits()
    if args.epochs is not None and args.epochs < 1:
        raise BadArgument(f"--epochs: expected an integer >= 1, got {args.epochs}")
    cache_dir = (args.cache_dir and os.path.abspath(args.cache_dir)) or engine.cache_dir
    if cache_dir:
        check_cache_dir(cache_dir)
    scans = scan_all([dataset_key(c) for c in configs], cache_dir, default_workers(engine),
                     limits)
    plans = build_plans(configs, scans, engine.k_epochs)
    report = plan_report(plans, args.epochs)
    print(json.dumps(report, indent=1) if args.json else format_plan(report))
    return 0
