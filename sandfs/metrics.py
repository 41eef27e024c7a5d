""".sand/metrics: the mount's status in the Prometheus text exposition format (version 0.0.4).

Built from the same typed record as status.json, so the two never disagree: every counter here
is a status.json figure under a `sandfs_*` name (counters end in `_total`, count since the
daemon started, or since the cache store was created for the cache's own counters).

`serve_metrics` answers GET /metrics on a loopback port (`--metrics-port`) from the daemon's
trio loop: each request costs one status record, as an open of .sand/metrics does, filtered for
the local user who asks, as .sand/metrics is. On loopback the kernel knows that user: the
client's end of the connection is a socket in /proc/net/tcp (or tcp6) with its creator's uid.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import trio

from sandfs.access import privileged
from sandfs.bounds import LimitReached, Quota
from sandfs.config.limits import DEFAULT_LIMITS, METRICS_BACKLOG, Limits
from sandfs.errors import UserError
from sandfs.ratelog import RateLimitedLog
from sandfs.status import MountStatus
from sandfs.threads import limiter

log = logging.getLogger(__name__)
ACCEPT_WARNINGS = RateLimitedLog(log)  # out of fds, accept fails ten times a second
LOOPBACK = "127.0.0.1"  # never another interface: the figures name the user's tasks
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST_BYTES = 8192
HEAD_SECONDS = 1.0  # a client that sends no full request in time is dropped
REQUEST_SECONDS = 5.0  # to take the answer
ACCEPT_RETRY_SECONDS = 0.1  # after a failed accept (out of fds): try again, never spin
SOCKET_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
StatusFor = Callable[[int | None], MountStatus]  # the record a uid may see (None: all of it)

# status.counters keys -> help text; each becomes sandfs_<key>_total
_WORK_COUNTERS = {
    "frames_decoded": "Frames decoded by the merged plan.",
    "frames_decoded_independent": "Frames the tasks would have decoded, each loading alone.",
    "views_materialized": "Views (batches) built.",
    "views_recomputed": "Views built again after their bytes were dropped.",
    "aug_ops": "Augmentation operations run.",
    "aug_ops_independent": "Augmentation operations the tasks would have run alone.",
    "crop_ops": "Crop operations run.",
    "crop_ops_independent": "Crop operations the tasks would have run alone.",
    "clips_recomputed": "Clips built again after their frames were evicted.",
    "frames_from_disk": "Frames read back from the cache store instead of decoded.",
    "frames_carried": "Frames decoded for a later window and kept on disk for it.",
    "clips_made_ahead": "Clips of the next window made by a decode pass, instead of carrying "
                        "its frames.",
}
_CACHE_GAUGES = {"bytes_used": "Bytes the cache store holds on disk.",
                 "budget_bytes": "The cache store's storage budget in bytes.",
                 "objects": "Objects in the cache store."}
_CACHE_COUNTERS = {"hits": "Cache store reads that found their object.",
                   "misses": "Cache store reads that did not.",
                   "evictions": "Objects evicted from the cache store.",
                   "recomputed": "Cache objects built again after eviction or corruption."}
_CACHE_FAILURES = ("corrupt_detected", "enospc", "write_failures", "no_room")
_REMOTE_COUNTERS = {"bytes_fetched": "Video bytes received from the remote store.",
                    "requests": "Requests made to the remote store.",
                    "retries": "Remote requests retried.",
                    "files_fetched": "Remote files copied in.",
                    "files_reused": "Remote files reused from an earlier fetch.",
                    "files_changed": "Remote files found changed on the store."}
# (metric name, TaskStatus field, type, help): one sample per task
_TASK_FIGURES = (
    ("views_served", "views_served", "counter", "View reads answered, per task."),
    ("stall_seconds", "stall_seconds", "counter", "Seconds readers waited for a view."),
    ("ready_ahead", "ready_ahead", "gauge", "Views ready beyond the task's position."),
    ("task_epochs", "epochs", "gauge", "Epochs the task's plan has."),
    ("task_iterations_per_epoch", "iterations_per_epoch", "gauge",
     "Iterations in each of the task's epochs."),
    ("task_videos", "videos", "gauge", "Videos the task reads."),
)


@dataclass(frozen=True, slots=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # with `_total` for counters, as exposed
    kind: str  # "counter" or "gauge"
    help: str
    samples: tuple[Sample, ...]


def metric(name: str, kind: str, help_text: str, value: float | None = None,
           samples: Iterable[Sample] = ()) -> Metric:
    """One metric; `value` gives it a single unlabelled sample."""
    full = f"sandfs_{name}_total" if kind == "counter" else f"sandfs_{name}"
    found = (Sample((), value),) if value is not None else tuple(samples)
    return Metric(full, kind, help_text, found)


def per_task(status: MountStatus, field: str) -> list[Sample]:
    return [Sample((("task", name),), getattr(task, field))
            for name, task in sorted(status.tasks.items())]


def collect(status: MountStatus) -> list[Metric]:
    """Every metric of one status record, in a stable order."""
    sched, cache, remote = status.scheduler, status.cache, status.remote
    out = [
        metric("uptime_seconds", "gauge", "Seconds since the daemon started.",
               status.uptime_seconds),
        metric("workers", "gauge", "Worker threads.", status.workers),
        metric("execution", "gauge", "Where video jobs run (1: the mode labelled).",
               samples=[Sample((("mode", status.execution),), 1)] if status.execution else ()),
        metric("memory_bytes", "gauge", "Bytes of views and clips held in memory.",
               status.memory_bytes),
        metric("memory_limit_bytes", "gauge", "The memory budget for views and clips.",
               status.memory_limit_bytes),
    ]
    out += [metric(key, "counter", text, status.counters.get(key, 0))
            for key, text in _WORK_COUNTERS.items()]
    out += [metric(name, kind, text, samples=per_task(status, field))
            for name, field, kind, text in _TASK_FIGURES]
    out += [
        metric("task_position", "gauge", "The task's reading position.",
               samples=[Sample((("task", name), ("what", what)), getattr(task, what))
                        for name, task in sorted(status.tasks.items())
                        for what in ("epoch", "iteration")]),
        metric("jobs_done", "counter", "Prematerialization jobs finished.", sched.jobs_done),
        metric("jobs_running", "gauge", "Prematerialization jobs running.", sched.jobs_running),
        metric("workers_active", "gauge", "Workers busy now.", sched.workers_active),
        metric("views_ready", "gauge", "Views built and waiting to be read.", sched.views_ready),
        metric("views_planned", "gauge", "Views planned in the current window.",
               sched.views_planned),
        metric("evicted_unread", "counter", "Views dropped before anyone read them.",
               sched.evicted_unread),
        metric("rebuilt_from_disk", "counter", "Views rebuilt from frames on disk.",
               sched.rebuilt_from_disk),
        metric("queue_demand", "gauge", "Readers blocked waiting for a view.",
               status.ondemand_waiting + sched.demand_waiting),
        metric("queue_prematerialize", "gauge", "Video jobs with clips not made yet.",
               sched.pending_jobs),
    ]
    out += [metric(f"cache_{key}", "gauge", text, cache.get(key, 0))
            for key, text in _CACHE_GAUGES.items()]
    out += [metric(f"cache_{key}", "counter", text, cache.get(key, 0))
            for key, text in _CACHE_COUNTERS.items()]
    out += [metric(f"remote_{key}", "counter", text, remote.get(key, 0))
            for key, text in _REMOTE_COUNTERS.items()]
    failures = [Sample((("kind", f"cache_{key}"),), cache.get(key, 0)) for key in _CACHE_FAILURES]
    failures.append(Sample((("kind", "remote_errors"),), remote.get("errors", 0)))
    out += [
        metric("failures", "counter", "Failures the daemon survived, by kind.",
               samples=failures),
        metric("bad_videos", "gauge", "Videos left out (unreadable or refused).",
               len(status.bad_videos)),
        metric("task_errors", "gauge", "Task registrations the daemon refused.",
               len(status.task_errors)),
    ]
    return out


def escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def format_metric(m: Metric) -> list[str]:
    lines = [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}"]
    for sample in m.samples:
        labels = ",".join(f'{key}="{escape(val)}"' for key, val in sample.labels)
        lines.append(f"{m.name}{{{labels}}} {format_value(sample.value)}" if labels
                     else f"{m.name} {format_value(sample.value)}")
    return lines


def render_metrics(status: MountStatus) -> bytes:
    """The whole exposition: HELP and TYPE for each metric, one line per sample."""
    lines = [line for m in collect(status) for line in format_metric(m)]
    return ("\n".join(lines) + "\n").encode()


# -- GET /metrics on a loopback port -------------------------------------------------------


async def open_metrics_port(port: int) -> list[trio.SocketListener]:
    """Bound before the mount is announced ready, so a port in use fails the mount."""
    try:
        return await trio.open_tcp_listeners(port, host=LOOPBACK)
    except OSError as exc:
        raise UserError(f"--metrics-port {port}: cannot listen on {LOOPBACK}:{port} "
                        f"({exc.strerror or exc})") from None


async def serve_metrics(status_for: StatusFor, listeners: list[trio.SocketListener],
                        limits: Limits = DEFAULT_LIMITS) -> None:
    """Answer on every listener. Each connection is accepted at once (no client waits in the
    kernel's backlog behind another's), then its user is told (`client_uids`, one read of
    the socket tables for all those accepted meanwhile): past `metrics_connections_per_uid`
    of one user, or `metrics_connections` of all users but root and the daemon's, it is closed
    at once; a client that sends no request in HEAD_SECONDS is dropped. At most
    METRICS_BACKLOG wait to be told; more are closed at once (docs/deploy.md#limits)."""
    clients = Quota("metrics connections", limits.metrics_connections_per_uid,
                    limits.metrics_connections, setting="metrics_connections")
    accepted, waiting = trio.open_memory_channel(METRICS_BACKLOG)
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(accept_all, listener, accepted)
        nursery.start_soon(admit_clients, waiting, clients, partial(answer, status_for))


async def accept_all(listener: trio.SocketListener,
                     accepted: trio.MemorySendChannel[trio.SocketStream]) -> None:
    """Accept every connection: a client never blocks this loop."""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:  # EMFILE and the like: never the mount's end
            ACCEPT_WARNINGS.warning("metrics port: accept failed: %s", exc)
            await trio.sleep(ACCEPT_RETRY_SECONDS)
            continue
        try:
            accepted.send_nowait(stream)
        except trio.WouldBlock:  # METRICS_BACKLOG wait to be told already
            await stream.aclose()


async def admit_clients(waiting: trio.MemoryReceiveChannel[trio.SocketStream], clients: Quota,
                        serve: Callable[[trio.SocketStream, int | None], Awaitable[None]]
                        ) -> None:
    """Tell the users of the connections accepted, all those waiting at once, and serve those
    within their limits; close the others at once."""
    async with trio.open_nursery() as nursery:
        async for first in waiting:
            streams = [first]
            with contextlib.suppress(trio.WouldBlock):
                while len(streams) < METRICS_BACKLOG:
                    streams.append(waiting.receive_nowait())
            ends = [connection_of(stream) for stream in streams]
            uids = await trio.to_thread.run_sync(client_uids, ends, limiter=limiter("metrics"))
            for stream, uid in zip(streams, uids, strict=True):
                counted = uid is not None and not privileged(uid)
                try:
                    if counted:
                        clients.take(uid)
                except LimitReached:
                    await stream.aclose()
                    continue
                nursery.start_soon(served_then_given, serve, stream, uid,
                                   clients if counted else None)


def connection_of(stream: trio.SocketStream) -> Connection | None:
    try:
        return Connection(stream.socket.getpeername()[:2], stream.socket.getsockname()[:2])
    except OSError:  # the client is gone already
        return None


async def served_then_given(serve: Callable, stream: trio.SocketStream, uid: int | None,
                            clients: Quota | None) -> None:
    try:
        await serve(stream, uid)
    finally:
        if clients is not None:
            clients.give(uid)


async def answer(status_for: StatusFor, stream: trio.SocketStream, uid: int | None) -> None:
    """One request of `uid` (None: not known), one response, then close; a client's failure
    never reaches the mount."""
    try:
        async with stream:
            head = None
            with trio.move_on_after(HEAD_SECONDS):
                head = await read_head(stream)
            if head is None:
                return  # idle: dropped
            viewer = None if uid is None or privileged(uid) else uid
            status = None if uid is None else partial(status_for, viewer)
            with trio.move_on_after(REQUEST_SECONDS):
                await stream.send_all(response(head, status))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("metrics client gone: %s", exc)


async def read_head(stream: trio.SocketStream) -> bytes:
    """The request line and headers (b"" when the client sent none or too much)."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) <= MAX_REQUEST_BYTES:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return b""
        data += chunk
    return data if b"\r\n\r\n" in data else b""


def response(head: bytes, status: Callable[[], MountStatus] | None) -> bytes:
    """The answer to `head`; `status` gives the asking user's record, None: the user is not
    known (refused)."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return http(400, b"Bad Request", b"a request line: GET /metrics HTTP/1.1\n")
    method, target = parts[0], parts[1].split(b"?", 1)[0]
    if method != b"GET":
        return http(405, b"Method Not Allowed", b"only GET\n", b"Allow: GET\r\n")
    if target != b"/metrics":
        return http(404, b"Not Found", b"the metrics are at /metrics\n")
    if status is None:
        return http(403, b"Forbidden", b"the local user of this connection is not known\n")
    return http(200, b"OK", render_metrics(status()), content_type=CONTENT_TYPE)


def http(code: int, reason: bytes, body: bytes, extra: bytes = b"",
         content_type: bytes = b"text/plain; charset=utf-8") -> bytes:
    head = (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n%s\r\n" % (code, reason, content_type, len(body), extra))
    return head + body


# -- who asks: the uid of a loopback connection's client end ------------------------------


@dataclass(frozen=True, slots=True)
class Connection:
    """A TCP connection as the server sees it: (host, port) of each end."""

    client: tuple[str, int]
    server: tuple[str, int]


def client_uid(connection: Connection, tables: Sequence[str] = SOCKET_TABLES) -> int | None:
    """The uid that created the client's socket of `connection`: its row in the kernel's socket
    tables has the client's address as local and ours as remote (the server's own socket is the
    mirror row). None when no table has it (the client already closed, /proc not mounted)."""
    return client_uids([connection], tables)[0]


def client_uids(connections: Sequence[Connection | None],
                tables: Sequence[str] = SOCKET_TABLES) -> list[int | None]:
    """`client_uid` of each connection, the tables read once for all of them: a flood of
    connections costs one read a batch, not one each, and only the rows of the clients' ports
    are parsed (a flood's thousands of rows cost a split each)."""
    wanted = {(c.client, c.server) for c in connections if c is not None}
    ports = {f":{client[1]:04X}" for client, _ in wanted}
    found: dict[tuple, int] = {}
    for table in tables:
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 7 and fields[1][-5:] in ports:
                ends = (socket_address(fields[1]), socket_address(fields[2]))
                if ends in wanted:
                    found.setdefault(ends, int(fields[7]))
    return [None if c is None else found.get((c.client, c.server)) for c in connections]


def socket_address(text: str) -> tuple[str, int]:
    """("127.0.0.1", 8080) of a /proc/net/tcp{,6} address ("0100007F:1F90"): the kernel prints
    each 32-bit word of the address in host byte order; a v4-mapped IPv6 address is IPv4."""
    host, _, port = text.partition(":")
    raw = b"".join(int(host[i : i + 8], 16).to_bytes(4, sys.byteorder)
                   for i in range(0, len(host), 8))
    address = ipaddress.ip_address(raw)
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address), int(port, 16)
