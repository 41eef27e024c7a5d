"""The per-user and total bounds of a mount (docs/deploy.md#limits): what one local user may
hold of a shared daemon. Set in a config's `engine: limits:` mapping or with `--limit NAME=N`
(which wins); root and the daemon's user are held to the totals only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace

from sandfs.config import fields as yaml_fields
from sandfs.config.yamlsafe import Value
from sandfs.errors import UserError


@dataclass(frozen=True, slots=True)
class Limits:
    handles_per_uid: int = 1024  # open handles on the mount (EMFILE)
    handles_total: int = 16384  # of all users (ENFILE)
    upload_bytes: int = 64 << 10  # one task YAML written to .sand/tasks (EFBIG)
    uploads_per_uid: int = 4  # task YAMLs being written at once (EDQUOT)
    uploads_total: int = 64  # (ENOSPC)
    tasks_per_uid: int = 16  # tasks registered through .sand/tasks (EDQUOT)
    tasks_total: int = 256  # (ENOSPC)
    registrations_per_uid: int = 2  # registrations being planned at once (EAGAIN)
    # open GET /metrics connections of users but root and the daemon's (closed at once past it)
    metrics_connections: int = 16
    metrics_connections_per_uid: int = 4  # of one user (closed at once past it)
    # another user's task whose views nobody opened for this long makes nothing ahead
    idle_after_s: int = 60
    # how many k-epoch windows past its furthest read such a task may open a view (EDQUOT)
    windows_ahead_of_reads: int = 4

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def updated(self, values: Mapping[str, int]) -> Limits:
        return replace(self, **values)


def read_limits_section(value: Value) -> tuple[tuple[str, int], ...]:
    """`engine: limits:` of one config: the (name, value) pairs it sets."""
    items = yaml_fields.mapping(value, Limits.names())
    return tuple((name, yaml_fields.integer(item, minimum=1)) for name, item in items.items())


def parse_limit_flags(flags: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """`--limit NAME=N` values; ValueError names the flag at fault."""
    parsed = []
    for flag in flags:
        name, _, number = flag.partition("=")
        if name not in Limits.names():
            raise ValueError(f"--limit {flag}: unknown limit {name!r}; known: "
                             f"{', '.join(Limits.names())}")
        if not number.isdigit() or int(number) < 1:
            raise ValueError(f"--limit {flag}: expected NAME=N with N >= 1")
        parsed.append((name, int(number)))
    return tuple(parsed)


DEFAULT_LIMITS = Limits()
# metrics connections accepted whose user is not told yet: more are closed at once
METRICS_BACKLOG = 256
# what the daemon's own descriptors may take beside the metrics port's: FUSE, the store, logs,
# worker processes' pipes, a scan's open files (users' handles on the mount hold none)
DAEMON_FDS = 512


def check_fd_room(limits: Limits, open_files: int) -> None:
    """Refuse limits whose descriptors cannot fit the soft RLIMIT_NOFILE `open_files`: past
    it an accept, a checkpoint or a source read would fail with EMFILE."""
    needed = limits.metrics_connections + METRICS_BACKLOG + DAEMON_FDS
    if needed > open_files:
        raise UserError(f"limits: metrics_connections={limits.metrics_connections} needs "
                        f"{needed} open files with the daemon's own {DAEMON_FDS} and "
                        f"{METRICS_BACKLOG} waiting connections; RLIMIT_NOFILE allows "
                        f"{open_files} (ulimit -n, or LimitNOFILE= of a systemd unit)")
