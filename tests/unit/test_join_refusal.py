"""A task refused while the scheduler takes it (after its plan joined the mount's
`Coordination`, before the book holds it) leaves no trace: not in the registry, not among the
coordination's tasks (whose configs shape the windows frozen later and the checkpoint), and
its checkpointed epoch offset is kept for it registered again."""

from __future__ import annotations

import pytest
import trio

from sandfs.config.loader import load_task_config
from sandfs.errors import UserError
from sandfs.media.scan import scan_dataset
from sandfs.plan.checkpoint import load_plan_state, save_plan_state
from sandfs.plan.coordination import Coordination
from sandfs.plan.mount import plan_tasks
from sandfs.sched import joining as joining_module
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.service import ViewService
from sandfs.stats import Stats
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import make_service, serving
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


async def lead_fails(self, plan):
    raise RuntimeError("its lead part failed")


async def refused(service, mine, joining) -> None:
    """`joining` refused by the running `service` (its lead fails), leaving no trace."""
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with pytest.raises(UserError, match="could not be planned"):
            await service.add_task(joining.cfg, "text")
        left_no_trace(service, mine)
        nursery.cancel_scope.cancel()


async def test_a_task_refused_before_the_book_takes_it_leaves_the_coordination(
        tmp_path, monkeypatch):
    await refused(*services(tmp_path, monkeypatch, lead_fails))


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


async def test_a_refused_task_keeps_its_checkpointed_epoch_offset(tmp_path, monkeypatch):
    """After a restart, a task refused before it was served (its lead failed) and registered
    again starts at its checkpointed epoch offset, not the leading task's: the bytes it read
    before the restart. The refusal dropped it from the checkpoint saved next."""
    service, mine, joining = services(tmp_path, monkeypatch, lead_fails)
    before = Coordination([mine.cfg])
    before.join(joining.cfg, 3)  # it joined the mount at epoch 3, then the daemon restarted
    save_plan_state(str(tmp_path), before.state())
    mine.coordination.load(load_plan_state(str(tmp_path)))
    await refused(service, mine, joining)
    assert offset_after_restart(tmp_path, mine.coordination, joining.cfg) == 3
    mine.coordination.join(joining.cfg, 1)  # registered again on the same mount
    assert mine.coordination.epoch_offset("joining") == 3


def offset_after_restart(cache_dir, mount: Coordination, cfg) -> int:
    """The offset `cfg` gets on joining a restart of `mount` from its next checkpoint."""
    save_plan_state(str(cache_dir), mount.state())
    again = Coordination(mount.task_configs())
    again.load(load_plan_state(str(cache_dir)))
    again.join(cfg, 0)
    return again.epoch_offset(cfg.task)


async def test_a_task_refused_as_it_is_planned_keeps_its_checkpointed_epoch_offset(
        tmp_path, dataset_dir):
    """Refused by `plan_new_task` itself (edited so that an epoch is empty): the checkpointed
    offset of the config that joined before the restart, which the edit discarded, is back."""
    cfg = load_task_config(write_config(tmp_path / "t0.yaml", task_config(dataset_dir)))
    key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    scans = {key: scan_dataset(*key)}
    service = make_service(plan_tasks([cfg], scans, k_epochs=2), scans=scans,
                           cache_dir=tmp_path)
    mount = service.tasks["t0"].coordination
    joined = load_task_config(write_config(tmp_path / "t1.yaml",
                                           task_config(dataset_dir, task="t1", seed=5)))
    before = Coordination([cfg])
    before.join(joined, 3)
    mount.load(before.state())  # the restart
    edited = task_config(dataset_dir, task="t1", seed=5,
                         sampling={"videos_per_batch": 13, "drop_last": True})
    async with serving(service):
        with pytest.raises(UserError, match="an epoch would be empty"):
            await service.add_task(load_task_config(write_config(tmp_path / "t1.yaml", edited)),
                                   "text")
    assert [c.task for c in mount.task_configs()] == ["t0"]
    assert offset_after_restart(tmp_path, mount, joined) == 3
