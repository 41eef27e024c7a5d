"""status.json: the keys and values users and tools read, from the typed records."""

from __future__ import annotations

import json

import pytest
import trio

from sandfs.errors import UserError
from sandfs.fileio import DAMAGED
from sandfs.media.types import BadVideo
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from sandfs.status import FailureLog
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_window_parts import until

ZERO_CACHE = {"bytes_used": 0, "budget_bytes": 0, "objects": 0, "hits": 0, "misses": 0,
              "evictions": 0, "recomputed": 0, "corrupt_detected": 0}


def test_status_json_of_a_fresh_mount(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(8), epochs=3)
    service = ViewService([plan], engine=OnDemandObjects(workers=2, memory_budget_bytes=1 << 20),
                          stats=Stats(), bad_videos=[BadVideo("x.mp4", "corrupt", "bad header")])
    service.opened_view(plan.name, 1, 1)
    status = json.loads(service.status_bytes())
    assert status.pop("uptime_seconds") >= 0 and status.pop("pid") > 0
    assert status == {
        # memory_limit: the scheduler's share and the on-demand objects' share
        "version": 1, "workers": 2, "execution": "threads", "memory_bytes": 0,
        "memory_limit_bytes": (1 << 30) + (1 << 20),
        "tasks": {plan.name: {"epoch": 1, "iteration": 1, "ready_ahead": 0, "views_served": 0,
                              "stall_seconds": 0.0, "epochs": 3,
                              "iterations_per_epoch": plan.iterations_per_epoch,
                              "videos": 8, "failed_views": 0,
                              "view_error": None, "videos_without_label": 0,
                              "label_rows_without_video": 0}},
        "frames_decoded": 0, "frames_decoded_independent": 0, "views_materialized": 0,
        "cache": ZERO_CACHE, "views_recomputed": 0, "aug_ops": 0, "aug_ops_independent": 0,
        "crop_ops": 0, "crop_ops_independent": 0,
        "scheduler": {"jobs_done": 0, "jobs_running": 0, "workers_active": 0, "views_ready": 0,
                      "views_planned": 0, "evicted_unread": 0, "rebuilt_from_disk": 0,
                      "clips_recomputed": 0, "windows_in_parts": []},
        "frames_from_disk": 0, "frames_carried": 0, "clips_made_ahead": 0,
        "queues": {"demand": 0, "prematerialize": 0},
        "bad_videos": [{"path": "x.mp4", "reason": "corrupt", "detail": "bad header"}],
        "task_errors": {},
        "remote": {"bytes_fetched": 0, "requests": 0, "errors": 0, "retries": 0,
                   "files_fetched": 0, "files_reused": 0, "files_changed": 0},
        "isolated_ops": {"processes": 0, "calls": 0, "failed": 0, "workers_replaced": 0,
                         "failures": []},
        "failures": [], "failures_total": 0,
        "state_files_rebuilt": DAMAGED.count,  # process-wide: other tests damage files too
    }
    assert service.positions == {plan.name: (1, 1)}


def test_a_user_sees_only_their_own_tasks_and_failures(tmp_path):
    mine = make_plan(tmp_path, videos=fake_videos(8), epochs=1)
    service = ViewService([mine], engine=OnDemandObjects(workers=1, memory_budget_bytes=1 << 20),
                          stats=Stats(), bad_videos=[BadVideo("secret.mp4", "corrupt", "x")])
    for _ in range(3):
        service.failures.record(mine.name, "0/0/view", "decode failed")
    service.failures.record("other", "videos/hidden.mp4", "source_changed")
    full = service.status_record()
    assert full.failures_total == 4 and [f.count for f in full.failures] == [3, 1]
    seen = json.loads(full.seen_by({mine.name}, set()).to_bytes())
    assert list(seen["tasks"]) == [mine.name]
    assert seen["bad_videos"] == []  # the scan's own entries name files of any user
    assert seen["failures"] == [{"task": mine.name, "path": "0/0/view",
                                 "reason": "decode failed", "count": 3}]
    assert seen["failures_total"] == 3
    nobody = json.loads(full.seen_by(set(), set()).to_bytes())
    assert nobody["tasks"] == {} and "hidden" not in json.dumps(nobody)


def test_the_failure_log_keeps_the_latest_distinct_failures():
    log = FailureLog(limit=2)
    for path in ("a", "b", "a", "c"):
        log.record("t", path, "why")
    assert [(f.path, f.count) for f in log.entries()] == [("a", 2), ("c", 1)]
    assert log.total == 4


async def test_a_status_read_during_a_join_shows_the_task_once_the_scheduler_has_it(
        tmp_path):
    """A task was registered before the scheduler took it (its planner waits while another
    task's window part is planned): status.json failed with EIO (KeyError) meanwhile, found at
    250,000 videos, then read a position of its own for it. It is served from the moment the
    scheduler's book holds it: before that status.json, positions and readiness leave it out,
    and its name stays taken."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = make_plan(tmp_path / "a", videos=fake_videos(8), epochs=1)
    joining = make_plan(tmp_path / "b", videos=fake_videos(8), epochs=1, task="joining")
    service = ViewService([mine], engine=OnDemandObjects(workers=1, memory_budget_bytes=1 << 20),
                          stats=Stats(), task_planner=lambda cfg, leaders: joining)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        async with service.scheduler.planner.tasks_steady:  # a part being planned
            nursery.start_soon(service.add_task, joining.cfg, "text")
            with trio.fail_after(10):
                await until(lambda: "joining" in service.registry.joining)
            status = json.loads(service.status_record().to_bytes())
            assert list(status["tasks"]) == list(service.positions) == [mine.name]
            with pytest.raises(UserError, match="already registered"):
                await service.registry.register(joining.cfg, service.scheduler.position)
        with trio.fail_after(10):
            await until(lambda: "joining" in service.tasks)
        assert "joining" in service.scheduler.book.plans and not service.registry.joining
        status = json.loads(service.status_record().to_bytes())
        assert (status["tasks"]["joining"]["epoch"], status["tasks"]["joining"]["iteration"]) \
            == (0, 0)
        assert service.registry.generations["joining"] == 0
        assert not service.registry.registering.held
        nursery.cancel_scope.cancel()
