"""The settings of one mount, decided in one place: the `engine:` sections of the task configs,
the command line's overrides, the defaults and the two benchmark ablations, validated once into
a frozen `MountSettings` that the daemon passes to everything it builds.

Per engine key the first config that sets it wins (a warning for each config that disagrees), a
command line value wins over all, and what is still unset gets its default here.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Any

from sandfs.config import fields
from sandfs.config.limits import DEFAULT_LIMITS, Limits, parse_limit_flags, read_limits_section
from sandfs.config.pipeline import view_shape
from sandfs.config.scan import DEFAULT_PACE, read_scan_section, scan_pace
from sandfs.config.schema import EngineConfig, TaskConfig
from sandfs.config.yamlsafe import Value
from sandfs.errors import UserError
from sandfs.media.scan_workers import ScanPace
from sandfs.media.types import MediaLimits
from sandfs.npy import npy_nbytes

# The `engine:` keys as written in YAML, and the EngineConfig field each one sets.
ENGINE_FIELDS = {
    "mountpoint": "mountpoint",
    "cache_dir": "cache_dir",
    "storage_budget": "storage_budget_bytes",
    "k_epochs": "k_epochs",
    "workers": "workers",
    "memory_limit": "memory_limit_bytes",
    "cache_format": "cache_format",
    "decode_ahead": "decode_ahead",
    "plan_ahead": "plan_ahead",
    "execution": "execution",
    "metrics_port": "metrics_port",
    "limits": "limits",
    "scan": "scan",
}
# The command line flag that overrides each EngineConfig field (errors name what the user typed).
CLI_FLAGS = {
    "mountpoint": "MOUNTPOINT",
    "cache_dir": "--cache-dir",
    "storage_budget_bytes": "--budget",
    "memory_limit_bytes": "--memory-limit",
    "k_epochs": "--k-epochs",
    "workers": "--workers",
    "decode_ahead": "--decode-ahead",
    "execution": "--execution",
    "metrics_port": "--metrics-port",
}
INTEGER_MINIMUMS = {"k_epochs": 1, "workers": 1, "decode_ahead": 0, "plan_ahead": 1}
PORTS = (1, 65535)
CACHE_FORMATS = ("auto", "raw", "lz4", "zstd", "png")
EXECUTION_MODES = ("threads", "processes")  # where video jobs run (sandfs.execution)
EXECUTIONS = ("auto", *EXECUTION_MODES)  # engine: execution
# `auto` runs video jobs in processes from this many cores its workers can use: where the
# threads' GIL, not the cores, would bound batches/s (docs/performance.md#the-default-auto)
PROCESSES_FROM_CORES = 16
MAX_SIZE_BYTES = 2**63 - 1

# Benchmark ablation knobs, read from the environment here and nowhere else: SANDFS_SCHEDULING
# picks the order batches are prepared in (fifo: the ablation of deadline priority),
# SANDFS_PRUNE what the store keeps when it prunes (leaves: final clips only, the ablation of
# pruning the object graph).
SCHEDULING_ENV, SCHEDULING_POLICIES = "SANDFS_SCHEDULING", ("priority", "fifo")
PRUNE_ENV, PRUNE_MODES = "SANDFS_PRUNE", ("algorithm1", "leaves")

# memory_limit is split: objects the engine builds on demand (decoded frames, intermediates)
# get this share, batches prepared ahead of the readers the rest.
ON_DEMAND_MEMORY_SHARE = Fraction(1, 4)
# The default memory_limit is what the run needs (docs/performance.md#memory): per task, the
# batches the scheduler holds in memory (those needed within 16 iterations: 8 ready ahead of
# its reader and as many being filled; later ones wait on disk); per worker, the frames of one
# decode pass (a 10 s 340x256 video decoded whole with decode-ahead: ~60 MB of RGB; bigger
# videos carry fewer windows, as carrying stays within a quarter of the limit).
BATCHES_IN_MEMORY = 16  # the scheduler's DISPLACE_HORIZON (config may not import sched; tested)
DECODE_WORKING_SET_BYTES = 128 << 20
MIN_MEMORY_LIMIT = 256 << 20

_SIZE_RE = re.compile(r"\s*([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*(?:([kmgtpe])(?:i?b)?|b)?\s*", re.I)
_SIZE_UNITS = "kmgtpe"  # binary multiples: k = 1024


@dataclass(frozen=True, slots=True)
class MountSettings:
    mountpoint: str  # absolute
    cache_dir: str  # absolute
    workers: int
    k_epochs: int
    decode_ahead: int
    memory_limit_bytes: int
    storage_budget_bytes: int  # the disk bound
    storage_budget_given: bool  # set by the user: the store may fill it (cache/sizing.py)
    cache_format: str  # auto | raw | lz4 | zstd | png
    scheduling: str  # SCHEDULING_POLICIES
    prune_mode: str  # PRUNE_MODES
    media_limits: MediaLimits
    metrics_port: int | None = None  # the loopback port of GET /metrics (None: none)
    limits: Limits = DEFAULT_LIMITS  # what one user may hold (config/limits.py)
    scan_pace: ScanPace = DEFAULT_PACE  # the background scan's (config/scan.py)
    execution: str = "threads"  # EXECUTION_MODES: where video jobs run (`auto` resolved)
    execution_setting: str = "threads"  # as given (EXECUTIONS)
    plan_ahead: int = 64  # batches (docs/config.md)

    @property
    def on_demand_memory_bytes(self) -> int:
        return int(self.memory_limit_bytes * ON_DEMAND_MEMORY_SHARE)

    @property
    def batch_memory_bytes(self) -> int:
        return int(self.memory_limit_bytes * (1 - ON_DEMAND_MEMORY_SHARE))


def mount_settings(
    configs: Sequence[TaskConfig], overrides: Mapping[str, Any], mountpoint: str | None,
    environ: Mapping[str, str] = os.environ,
) -> tuple[MountSettings, list[str]]:
    """The settings of a mount of `configs` and the warnings about configs that disagree.
    `overrides`: command line values by EngineConfig field (None: not given). Raises UserError
    with one line naming the flag, variable or task at fault. `overrides["limits"]`: the
    `--limit NAME=N` flags, set over the config's `limits:` one by one."""
    overrides = dict(overrides)
    limit_flags = overrides.pop("limits", None) or ()
    engine, warnings = cli_engine(configs, overrides)
    mountpoint = mountpoint or engine.mountpoint
    if not mountpoint:
        raise UserError("no mountpoint: give one on the command line or as engine.mountpoint")
    mountpoint = os.path.abspath(mountpoint)
    cache_dir = os.path.abspath(engine.cache_dir or default_cache_dir(mountpoint, environ))
    scheduling, prune_mode = ablations(environ)
    workers = default_workers(engine)
    settings = MountSettings(
        mountpoint=mountpoint,
        cache_dir=cache_dir,
        workers=workers,
        k_epochs=engine.k_epochs,
        decode_ahead=engine.decode_ahead,
        plan_ahead=engine.plan_ahead,
        memory_limit_bytes=engine.memory_limit_bytes or default_memory_limit(configs, workers),
        storage_budget_bytes=engine.storage_budget_bytes or default_storage_budget(cache_dir),
        storage_budget_given=engine.storage_budget_bytes is not None,
        cache_format=engine.cache_format,
        scheduling=scheduling,
        prune_mode=prune_mode,
        media_limits=media_limits(environ),
        metrics_port=engine.metrics_port,
        limits=mount_limits(engine.limits, limit_flags),
        scan_pace=scan_pace(engine.scan),
        execution=resolve_execution(engine.execution, workers, usable_cores()),
        execution_setting=engine.execution,
    )
    return settings, warnings


def cli_engine(configs: Sequence[TaskConfig], overrides: Mapping[str, Any]
               ) -> tuple[EngineConfig, list[str]]:
    """`merge_engines` with its errors in the command line's words."""
    try:
        return merge_engines(configs, overrides)
    except ValueError as exc:
        name, _, reason = str(exc).partition(": ")
        raise UserError(f"{CLI_FLAGS.get(name, name)}: {reason}") from None


def mount_limits(configured: Sequence[tuple[str, int]], flags: Sequence[str]) -> Limits:
    try:
        return DEFAULT_LIMITS.updated(dict(configured) | dict(parse_limit_flags(flags)))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def check_views_fit(config: TaskConfig, settings: MountSettings) -> None:
    """A view must fit the memory kept for prepared batches, or the mount could never serve
    (`sandfs.registration.check_task` checks every task joining a mount with it)."""
    shape, dtype = view_shape(config.dataset)
    nbytes = npy_nbytes(shape, dtype)
    if nbytes > settings.batch_memory_bytes:
        raise UserError(
            f"{config.source_path}: task {config.task}: a view of {nbytes} bytes "
            f"({'x'.join(map(str, shape))} {dtype}) does not fit the "
            f"{settings.batch_memory_bytes} bytes that memory_limit "
            f"{settings.memory_limit_bytes} keeps for prepared batches; raise "
            f"engine.memory_limit or make the views smaller")


# --- defaults ----------------------------------------------------------------------------------


def default_cache_dir(mountpoint: str, environ: Mapping[str, str] = os.environ) -> str:
    tag = hashlib.sha1(mountpoint.encode()).hexdigest()[:12]
    base = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "sandfs", tag)


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset may
    narrow below the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(engine: EngineConfig) -> int:
    return engine.workers or usable_cores()


def resolve_execution(execution: str, workers: int, cores: int) -> str:
    """`auto`: processes where `workers` busy on as many of the `cores` would make batches
    faster than the threads' GIL lets through (`PROCESSES_FROM_CORES`), threads below, where
    processes cost a fifth more CPU and a third more memory a batch; any other value as is."""
    if execution != "auto":
        return execution
    return "processes" if min(workers, cores) >= PROCESSES_FROM_CORES else "threads"


def default_memory_limit(configs: Sequence[TaskConfig], workers: int,
                         physical_bytes: int | None = None) -> int:
    """What the run needs, not a share of the machine: every task's views, BATCHES_IN_MEMORY of
    each (ready ahead of its reader, and being filled), and each worker's decode working set;
    then the on-demand share on top. Within half of RAM, and at least MIN_MEMORY_LIMIT. Tasks
    with the same dataset section and seed (a search's identical trials) read the same batches,
    held once: they count once. A mount without tasks (its tasks join later) takes a quarter
    of RAM: what they need is not known yet."""
    if physical_bytes is None:
        physical_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if not configs:
        return max(MIN_MEMORY_LIMIT, physical_bytes // 4)
    distinct = {(config.dataset, config.seed): config for config in configs}
    views = sum(npy_nbytes(*view_shape(config.dataset)) for config in distinct.values())
    scheduler = views * BATCHES_IN_MEMORY + workers * DECODE_WORKING_SET_BYTES
    needed = int(scheduler / (1 - ON_DEMAND_MEMORY_SHARE))
    return max(MIN_MEMORY_LIMIT, min(needed, physical_bytes // 2))


def default_storage_budget(cache_dir: str) -> int:
    """A quarter of the free space where the cache lives (the nearest folder that exists), at
    most 64 GiB."""
    where = cache_dir
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    info = os.statvfs(where)
    return max(1 << 20, min(info.f_bavail * info.f_frsize // 4, 64 << 30))


def ablations(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(scheduling policy, prune mode) from SANDFS_SCHEDULING and SANDFS_PRUNE."""
    chosen = []
    for variable, allowed in ((SCHEDULING_ENV, SCHEDULING_POLICIES), (PRUNE_ENV, PRUNE_MODES)):
        value = environ.get(variable) or allowed[0]
        if value not in allowed:
            raise UserError(f"{variable}: expected {' or '.join(allowed)}, got {value!r}")
        chosen.append(value)
    return chosen[0], chosen[1]


def media_limits(environ: Mapping[str, str] = os.environ) -> MediaLimits:
    try:
        return MediaLimits.from_env(environ=environ)
    except ValueError as exc:
        raise UserError(str(exc)) from None


# --- the engine: section -----------------------------------------------------------------------


def read_engine_section(value: Value | None, base_dir: str
                        ) -> tuple[EngineConfig, frozenset[str]]:
    """The `engine:` section of one config and the EngineConfig fields it sets (a null value
    sets nothing)."""
    if value is None or value.data is None:
        return EngineConfig(), frozenset()
    path = partial(_path_setting, base_dir=base_dir)
    readers: dict[str, Callable[[Value], Any]] = {
        "mountpoint": path,
        "cache_dir": path,
        "storage_budget": _size_setting,
        "k_epochs": partial(fields.integer, minimum=INTEGER_MINIMUMS["k_epochs"]),
        "workers": _workers_setting,
        "memory_limit": _size_setting,
        "cache_format": partial(fields.choice, choices=CACHE_FORMATS),
        "execution": partial(fields.choice, choices=EXECUTIONS),
        "decode_ahead": partial(fields.integer, minimum=INTEGER_MINIMUMS["decode_ahead"]),
        "plan_ahead": partial(fields.integer, minimum=INTEGER_MINIMUMS["plan_ahead"]),
        "metrics_port": partial(fields.integer, minimum=PORTS[0], maximum=PORTS[1]),
        "limits": read_limits_section,
        "scan": read_scan_section,
    }
    settings = {
        ENGINE_FIELDS[key]: readers[key](item)
        for key, item in fields.mapping(value, tuple(ENGINE_FIELDS)).items()
        if item.data is not None
    }
    return EngineConfig(**settings), frozenset(settings)


def _path_setting(value: Value, *, base_dir: str) -> str:
    return fields.resolve_path(fields.string(value, what="a path"), base_dir)


def _size_setting(value: Value) -> int:
    if not isinstance(value.data, int | str) or isinstance(value.data, bool):
        raise value.error(f"expected a size like 200G or 512M, got {fields.describe(value)}")
    try:
        return parse_size(value.data)
    except ValueError as e:
        raise value.error(str(e)) from None


def _workers_setting(value: Value) -> int | None:
    if value.data == "auto":
        return None
    if not isinstance(value.data, int) or isinstance(value.data, bool):
        raise value.error(f"expected auto or an integer >= 1, got {fields.describe(value)}")
    return fields.integer(value, minimum=INTEGER_MINIMUMS["workers"])


# --- merging configs and overrides -------------------------------------------------------------


def merge_engines(
    configs: Sequence[TaskConfig], overrides: Mapping[str, Any]
) -> tuple[EngineConfig, list[str]]:
    """One engine for a mount: per key the first config that sets it wins (a warning for each
    config that sets another value), then non-None `overrides` (EngineConfig field names; CLI
    values: `workers` may be "auto" or digits, sizes size strings) win over all. A bad override
    raises ValueError starting with its field name."""
    overridden = {name: _override(name, v) for name, v in overrides.items() if v is not None}
    settings: dict[str, Any] = {}
    origin: dict[str, str] = {}
    warnings = []
    for config in configs:
        for yaml_key, name in ENGINE_FIELDS.items():
            if name not in config.engine_given or name in overridden:
                continue  # a CLI value settles any disagreement silently
            value = getattr(config.engine, name)
            if name not in settings:
                settings[name], origin[name] = value, config.source_path
            elif value != settings[name]:
                warnings.append(
                    f"engine.{yaml_key}: {config.source_path} sets {_show(name, value)} but "
                    f"{origin[name]} (given first) sets {_show(name, settings[name])}; "
                    f"using {_show(name, settings[name])}"
                )
    return EngineConfig(**{**settings, **overridden}), warnings


def _override(name: str, value: Any) -> Any:
    """Check one CLI override; ValueError names the EngineConfig field."""
    if name in ("mountpoint", "cache_dir"):
        return os.path.abspath(os.path.expanduser(os.fspath(value)))
    choices = {"cache_format": CACHE_FORMATS, "execution": EXECUTIONS}.get(name)
    if choices is not None:
        if value not in choices:
            raise ValueError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")
        return value
    if name in ("storage_budget_bytes", "memory_limit_bytes"):
        try:
            return parse_size(value)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    if name == "workers":
        return _workers_override(value)
    if name == "metrics_port":
        if not isinstance(value, int) or isinstance(value, bool) \
                or not PORTS[0] <= value <= PORTS[1]:
            raise ValueError(f"{name}: expected a port number {PORTS[0]}..{PORTS[1]}, "
                             f"got {value!r}")
        return value
    if name in INTEGER_MINIMUMS:
        least = INTEGER_MINIMUMS[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
        return value
    raise ValueError(f"unknown engine setting {name!r}; known: {', '.join(ENGINE_FIELDS.values())}")


def _workers_override(value: Any) -> int | None:
    if value == "auto":
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < INTEGER_MINIMUMS["workers"]:
        raise ValueError(f"workers: expected a positive integer or auto, got {value!r}")
    return value


def _show(name: str, value: Any) -> str:
    if name == "workers" and value is None:
        return "auto"
    return str(value)


# --- sizes -------------------------------------------------------------------------------------


def parse_size(text: str | int) -> int:
    """Bytes from `4096`, `512M`, `200G`, `1.5T`, `10GiB` (K/M/G/T/P/E are powers of 1024;
    a trailing B or iB is optional). Raises ValueError."""
    is_int = isinstance(text, int) and not isinstance(text, bool)
    size = text if is_int else _size_from_text(text)
    if not 1 <= size <= MAX_SIZE_BYTES:
        raise ValueError(f"a size must be between 1 byte and {MAX_SIZE_BYTES}, got {text!r}")
    return size


def _size_from_text(text: object) -> int:
    match = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"expected a size like 200G, 512M, 1.5T, 10GiB or a number of bytes, got {text!r}"
        )
    number, unit = Fraction(match.group(1)), (match.group(2) or "").lower()
    if not unit and number.denominator != 1:
        raise ValueError(f"a number of bytes must be whole, got {text!r}")
    scale = 1024 ** (_SIZE_UNITS.index(unit) + 1) if unit else 1
    return int(number * scale)  # a fractional unit rounds down to whole bytes (0.3K -> 307)
