"""`render_metrics`: the Prometheus text format of a status record, parsed by the official
client's parser, with labels escaped and nothing left out."""

from __future__ import annotations

from dataclasses import replace

from sandfs.metrics import render_metrics
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from sandfs.status import TaskStatus
from tests.helpers.metrics import assert_between, parse_metrics
from tests.helpers.plans import fake_videos, make_plan


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
    assert samples[("sandfs_failures_total", (("kind", "remote_errors"),))] == 0
    assert_between(samples, service.status(), service.status())


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
