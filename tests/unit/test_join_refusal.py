"""A task refused while the scheduler takes it (after its plan joined the mount's
`Coordination`, before the book holds it) leaves no trace: not in the registry, not among the
coordination's tasks (whose configs shape the windows frozen later and the checkpoint)."""

from __future__ import annotations

import pytest
import trio

from sandfs.errors import UserError
from sandfs.sched import joining as joining_module
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from tests.helpers.plans import fake_videos, make_plan


def services(tmp_path, monkeypatch, resolve_lead) -> tuple:
    """A service of one task, and a task joining it whose `_resolve_lead` is `resolve_lead`:
    (service, the first plan, the joining plan)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = make_plan(tmp_path / "a", videos=fake_videos(8), epochs=1)
    joining = make_plan(tmp_path / "b", videos=fake_videos(8), epochs=1, task="joining")
    joining.coordination = mine.coordination

    def planner(cfg, leaders):  # as plan_new_task: joins the coordination, then plans
        mine.coordination.join(cfg, 0)
        return joining

    monkeypatch.setattr(joining_module.TaskJoins, "_resolve_lead", resolve_lead)
    service = ViewService([mine], engine=OnDemandObjects(workers=1, memory_budget_bytes=1 << 20),
                          stats=Stats(), task_planner=planner)
    return service, mine, joining


def left_no_trace(service, mine) -> None:
    assert "joining" not in service.tasks and not service.registry.joining
    assert [c.task for c in mine.coordination.task_configs()] == [mine.name]
    assert "joining" not in service.scheduler.book.plans


async def test_a_task_refused_before_the_book_takes_it_leaves_the_coordination(
        tmp_path, monkeypatch):
    async def fails(self, plan):
        raise RuntimeError("its lead part failed")

    service, mine, joining = services(tmp_path, monkeypatch, fails)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with pytest.raises(UserError, match="could not be planned"):
            await service.add_task(joining.cfg, "text")
        left_no_trace(service, mine)
        nursery.cancel_scope.cancel()


async def test_a_join_cancelled_before_the_book_takes_it_leaves_the_coordination(
        tmp_path, monkeypatch):
    """The mount stopping meanwhile: the plan checkpoint saved then holds no such task."""
    started = trio.Event()

    async def waits(self, plan):
        started.set()
        await trio.sleep_forever()

    service, mine, joining = services(tmp_path, monkeypatch, waits)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with trio.fail_after(10):
            async with trio.open_nursery() as adding:
                adding.start_soon(service.add_task, joining.cfg, "text")
                await started.wait()
                adding.cancel_scope.cancel()
        left_no_trace(service, mine)
        nursery.cancel_scope.cancel()
