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


async def test_a_task_refused_before_the_book_takes_it_leaves_the_coordination(
        tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = make_plan(tmp_path / "a", videos=fake_videos(8), epochs=1)
    joining = make_plan(tmp_path / "b", videos=fake_videos(8), epochs=1, task="joining")
    joining.coordination = mine.coordination

    def planner(cfg, leaders):  # as plan_new_task: joins the coordination, then plans
        mine.coordination.join(cfg, 0)
        return joining

    async def fails(self, plan):
        raise RuntimeError("its lead part failed")

    monkeypatch.setattr(joining_module.TaskJoins, "_resolve_lead", fails)
    service = ViewService([mine], engine=OnDemandObjects(workers=1, memory_budget_bytes=1 << 20),
                          stats=Stats(), task_planner=planner)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with pytest.raises(UserError, match="could not be planned"):
            await service.add_task(joining.cfg, "text")
        assert "joining" not in service.tasks and not service.registry.joining
        assert [c.task for c in mine.coordination.task_configs()] == [mine.name]
        assert "joining" not in service.scheduler.book.plans
        nursery.cancel_scope.cancel()
