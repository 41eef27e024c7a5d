"""`render_metrics`: the Prometheus text format of a status record, parsed by the official
client's parser, with labels escaped and nothing left out; the answers of GET /metrics and
the `metrics_port` setting."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace

import pytest

from sandfs.config.limits import DEFAULT_LIMITS, check_fd_room
from sandfs.config.loader import ConfigError, load_task_config
from sandfs.config.settings import cli_engine, merge_engines
from sandfs.errors import UserError
from sandfs.metrics import (
    Connection,
    client_uid,
    client_uids,
    render_metrics,
    response,
    socket_address,
)
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from sandfs.status import TaskStatus
from tests.helpers.config_texts import BASE, edited
from tests.helpers.metrics import assert_between, parse_metrics
from tests.helpers.plans import fake_videos, make_plan
from tests.helpers.users import NOBODY, connected_as


def fresh_status(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=3)
    service = ViewService([plan], engine=OnDemandObjects(workers=2, memory_budget_bytes=1 << 20),
                          stats=Stats())
    service.opened_view(plan.name, 1, 1)
    return service, plan.name


def test_every_family_parses_with_help_and_type(tmp_path):
    service, task = fresh_status(tmp_path)
    text = render_metrics(service.status_record()).decode()
    samples = parse_metrics(text)
    assert text.endswith("\n")
    assert samples[("sandfs_task_position", (("task", task), ("what", "epoch")))] == 1
    assert samples[("sandfs_task_position", (("task", task), ("what", "iteration")))] == 1
    assert samples[("sandfs_workers", ())] == 2
    assert samples[("sandfs_execution", (("mode", "threads"),))] == 1
    assert samples[("sandfs_failures_total", (("kind", "remote_errors"),))] == 0
    assert_between(samples, service.status(), service.status())


def test_status_and_metrics_say_where_video_jobs_run(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=1)
    service = ViewService([plan], engine=OnDemandObjects(workers=2, memory_budget_bytes=1 << 20),
                          stats=Stats(), execution="processes")
    assert service.status()["execution"] == "processes"
    samples = parse_metrics(render_metrics(service.status_record()).decode())
    assert samples[("sandfs_execution", (("mode", "processes"),))] == 1
    assert not any(name == "sandfs_execution" and labels != (("mode", "processes"),)
                   for name, labels in samples)


def test_counters_follow_the_stats(tmp_path):
    service, task = fresh_status(tmp_path)
    service.stats.add("frames_decoded", 30)
    service.stats.add("frames_decoded_independent", 90)
    service.stats.add_task(task, "views_served", 4)
    service.stats.add_stall(task, 1.25)
    samples = parse_metrics(render_metrics(service.status_record()).decode())
    assert samples[("sandfs_frames_decoded_total", ())] == 30
    assert samples[("sandfs_frames_decoded_independent_total", ())] == 90
    assert samples[("sandfs_views_served_total", (("task", task),))] == 4
    assert samples[("sandfs_stall_seconds_total", (("task", task),))] == 1.25


def test_label_values_are_escaped(tmp_path):
    service, _ = fresh_status(tmp_path)
    status = service.status_record()
    odd = 'a"b\\c\nd'
    status = replace(status, tasks={odd: TaskStatus(0, 0, 3, 7, 0.5, 1, 4, 2)})
    samples = parse_metrics(render_metrics(status).decode())
    assert samples[("sandfs_views_served_total", (("task", odd),))] == 7
    assert samples[("sandfs_ready_ahead", (("task", odd),))] == 3


# -- GET /metrics: answers, and the port setting -------------------------------------------


@pytest.mark.parametrize(("head", "code"), [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"200 OK"),
    (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", b"200 OK"),
    (b"GET / HTTP/1.1\r\n\r\n", b"404 Not Found"),
    (b"POST /metrics HTTP/1.1\r\n\r\n", b"405 Method Not Allowed"),
    (b"", b"400 Bad Request"),
    (b"hello\r\n\r\n", b"400 Bad Request"),
])
def test_http_answers(tmp_path, head, code):
    service, task = fresh_status(tmp_path)
    reply = response(head, service.status_record)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 " + code
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(body)}".encode() in headers.split(b"\r\n")
    if code == b"200 OK":
        assert b"Content-Type: text/plain; version=0.0.4; charset=utf-8" in headers
        assert ("sandfs_views_served_total", (("task", task),)) in parse_metrics(body.decode())


def test_a_user_who_cannot_be_told_is_refused(tmp_path):
    reply = response(b"GET /metrics HTTP/1.1\r\n\r\n", None)
    assert reply.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"sandfs_" not in reply
    assert response(b"GET /other HTTP/1.1\r\n\r\n", None).startswith(b"HTTP/1.1 404")


# -- who asks: the client socket's uid -----------------------------------------------------


def test_socket_table_addresses_parse():
    assert socket_address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert socket_address("0000000000000000FFFF00000100007F:0050") == ("127.0.0.1", 80)
    assert socket_address("00000000000000000000000001000000:0016") == ("::1", 22)


def test_the_client_row_is_told_from_the_server_row(tmp_path):
    """Each loopback connection has two rows, mirror images: only the client's has its uid."""
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    server, client = "0100007F:1F90", "0100007F:A000"
    table = tmp_path / "tcp"
    table.write_text(header
                     + f"   0: {server} 00000000:0000 0A 0:0 00:00 0 0 0 1 0\n"
                     + f"   1: {server} {client} 01 0:0 00:00 0 0 0 2 0\n"
                     + f"   2: {client} {server} 01 0:0 00:00 0 1234 0 3 0\n")
    ends = Connection(("127.0.0.1", 0xA000), ("127.0.0.1", 8080))
    assert client_uid(ends, [str(tmp_path / "missing"), str(table)]) == 1234
    assert client_uid(Connection(("127.0.0.1", 1), ("127.0.0.1", 8080)), [str(table)]) is None
    assert client_uid(ends, []) is None


def test_many_clients_are_told_from_one_read_of_the_tables(tmp_path):
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    server = "0100007F:1F90"
    rows = [f"   {i}: 0100007F:{0xA000 + i:04X} {server} 01 0:0 00:00 0 {1000 + i} 0 3 0\n"
            for i in range(3)]
    table = tmp_path / "tcp"
    table.write_text(header + "".join(rows))
    ends = [Connection(("127.0.0.1", 0xA000 + i), ("127.0.0.1", 8080)) for i in (2, 0, 7)]
    assert client_uids([*ends, None], [str(table)]) == [1002, 1000, None, None]


def test_limits_whose_descriptors_cannot_fit_are_refused():
    check_fd_room(DEFAULT_LIMITS, 1024)
    with pytest.raises(UserError, match="metrics_connections=4000 needs 4768 open files"):
        check_fd_room(replace(DEFAULT_LIMITS, metrics_connections=4000), 4096)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
@pytest.mark.parametrize("uid", [0, NOBODY])
def test_a_real_loopback_client_is_known_by_its_uid(uid):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        with connected_as(uid, listener.getsockname()), listener.accept()[0] as conn:
            ends = Connection(conn.getpeername(), conn.getsockname())
            assert client_uid(ends) == uid


def engine_text(lines: str) -> str:
    return edited(("engine:                          # 26\n  storage_budget: 1G             # 27\n",
                   "engine:\n" + lines))


def test_the_port_comes_from_the_engine_section_or_the_command_line():
    config = load_task_config("a.yaml", check_paths=False,
                              text=engine_text("  metrics_port: 9464\n"))
    assert merge_engines([config], {})[0].metrics_port == 9464
    assert merge_engines([config], {"metrics_port": 9100})[0].metrics_port == 9100
    assert merge_engines([load_task_config("b.yaml", check_paths=False, text=BASE)],
                         {})[0].metrics_port is None


@pytest.mark.parametrize("port", [0, 65536, "9464", True])
def test_a_bad_port_is_a_clear_error(port):
    with pytest.raises(ConfigError, match=r"engine\.metrics_port"):
        load_task_config("a.yaml", check_paths=False,
                         text=engine_text(f"  metrics_port: {json.dumps(port)}\n"))
    base = load_task_config("b.yaml", check_paths=False, text=BASE)
    with pytest.raises(UserError, match=r"--metrics-port: expected a port number 1\.\.65535"):
        cli_engine([base], {"metrics_port": port})
