"""A large window planned in parts as its videos are probed (docs/contract.md#lazy-scan): a
reader past the first batches waits for its batch's part, not for the whole window; the views
are those of the window planned whole; and nothing of a window's pruning, nor the decision
whether it needs any, runs on the event loop."""

from __future__ import annotations

import threading
from collections import Counter

import trio
import trio.testing
import yaml

from sandfs.cache import ObjectStore
from sandfs.config.loader import load_task_config
from sandfs.media.scan import scan_dataset
from sandfs.plan.mount import plan_tasks
from sandfs.plan.window import WindowPlan, view_key
from sandfs.sched import objects
from sandfs.sched import planning as planning_module
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import make_service, serving
from tests.helpers.reference import reference_view
from tests.unit.test_scheduler import (
    half_the_clips,
    joining_task,
    read_all,
    recording_windows,
    scheduler_for,
    settle,
    window_0_refined,
)


def in_parts(monkeypatch) -> None:
    monkeypatch.setattr(planning_module, "LEAD_CLIPS", 1)  # every window where a task stands
    monkeypatch.setattr(planning_module, "LEAD_BATCHES", 1)


def rest_held(scheduler) -> tuple[threading.Event, list]:
    """The window's last part (its rest) waits for the returned event; the parts planned go
    into the list as ("lead" | "part" | "rest", window)."""
    held, parts, planned = threading.Event(), [], scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset()):
        kind = "rest" if lead is None and skip else "part" if skip else "lead" if lead else ""
        parts.append((kind, window))
        if kind == "rest":
            held.wait(10)
        return planned(window, lead, skip)

    scheduler.planner.plan_active = planning
    return held, parts


async def until(condition) -> None:
    """Once `condition()` holds (what a planning thread changes too: no event to wait on)."""
    while True:
        if condition():
            return
        await trio.sleep(0.01)


async def test_a_reader_past_the_first_batches_waits_for_its_part_not_the_window(
        tmp_path, monkeypatch):
    """A cold mount of 10,000 videos served its first 4 batches from the window's lead part,
    and a reader of the 5th waited for the rest: the whole scan. The window is planned in
    parts that follow the readers: a batch in the second part is made while the rest of the
    window is not planned yet."""
    in_parts(monkeypatch)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    held, parts = rest_held(scheduler)
    past = view_key(plan, 0, plan.iterations_per_epoch // 4)  # not in the lead part's batches
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.opened(plan.name, 0, past.iteration)
        with trio.fail_after(10):
            got = await scheduler.wait_view(past, plan.name)
        assert got is not None and not held.is_set()
        assert scheduler.book.rest_pending == {0}  # the rest still being planned
        assert parts[0] == ("lead", 0) and ("part", 0) in parts
        held.set()
        await settle(scheduler)
        assert scheduler.book.rest_pending == set()
        nursery.cancel_scope.cancel()


async def test_parts_double_and_decode_each_video_once_a_window(tmp_path, monkeypatch):
    """Each part holds as many new videos as the window holds already (the scans of the
    window's batches stay few), each video with all its clips: one pass a video a window.
    Parts are chosen in the planning thread."""
    in_parts(monkeypatch)
    plan, scheduler, materializer = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    events = []
    recording_windows(scheduler, materializer, events)
    sizes = []
    next_part = scheduler.planner._next_part

    def recorded(window, planned):
        assert threading.get_ident() != loop_thread  # it walks the window's batches
        part = next_part(window, planned)
        sizes.append((len(planned), None if part is None else len(part)))
        return part

    loop_thread = threading.get_ident()

    scheduler.planner._next_part = recorded
    await read_all(plan, scheduler)
    per_batch = plan.sampling.videos_per_batch  # the lead part: one batch's videos
    assert [s[0] for s in sizes] == [per_batch << i for i in range(len(sizes))], sizes
    assert len(sizes) >= 4 and sizes[-1][1] is None, sizes
    assert all(new == planned for planned, new in sizes[:-1]), sizes
    decoded = Counter(name for kind, name, *_ in events if kind == "decode")
    assert decoded == {v.name: 1 for v in plan.videos}  # k = 2 epochs: one window


async def test_a_task_joining_meanwhile_has_the_rest_planned_at_once(tmp_path, monkeypatch):
    """A task joins the windows once none is planned in parts (the rest is planned with the
    tasks the window's lead part had); its registration does not wait for that. From the
    moment it waits, the window's rest is planned in one go: the doubling parts would keep
    it out of the windows longer."""
    in_parts(monkeypatch)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    in_part, joining = threading.Event(), threading.Event()
    kinds, planned = [], scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset()):
        kinds.append("rest" if lead is None and skip else "part" if skip else "whole/lead")
        if kinds[-1] == "part":
            in_part.set()
            joining.wait(10)  # the task comes while the first part after the lead is planned
        return planned(window, lead, skip)

    scheduler.planner.plan_active = planning
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        joined = trio.Event()

        async def join():
            await scheduler.add_plan(joining_task(tmp_path, plan))
            joined.set()

        await trio.to_thread.run_sync(in_part.wait, 10)
        nursery.start_soon(join)
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.planner._joins_waiting == 1
        joining.set()
        with trio.fail_after(10):
            await joined.wait()
            await until(lambda: "later" in scheduler.book.plans)
        assert kinds[:3] == ["whole/lead", "part", "rest"], kinds
        await settle(scheduler)
        nursery.cancel_scope.cancel()


async def test_views_planned_in_parts_equal_the_window_planned_whole(tmp_path, monkeypatch):
    (tmp_path / "whole").mkdir()
    plan, scheduler, _ = scheduler_for(tmp_path / "whole", videos=96, epochs=4)
    whole = await read_all(plan, scheduler)
    in_parts(monkeypatch)
    (tmp_path / "parts").mkdir()
    plan, scheduler, _ = scheduler_for(tmp_path / "parts", videos=96, epochs=4)
    parts = await read_all(plan, scheduler)
    assert None not in whole.values() and parts == whole


async def test_a_window_whole_from_parts_is_pruned_off_the_event_loop(tmp_path, monkeypatch):
    """At 250,000 videos whether a window needs pruning (a pass over its 1.25M clips) took
    the event loop 1.2 s as its last part was added, and its snapshot for the pruning thread
    more. Both run in the pruning thread: a window that fits is not pruned, one that does not
    is."""
    in_parts(monkeypatch)
    loop_thread, calls = threading.get_ident(), []
    sizes, snapshot = objects.leaves_nbytes, WindowPlan.snapshot

    def leaves_nbytes(plan):
        calls.append(("fits?", threading.get_ident()))
        return sizes(plan)

    def snapshotting(plan):
        calls.append(("snapshot", threading.get_ident()))
        return snapshot(plan)

    monkeypatch.setattr(objects, "leaves_nbytes", leaves_nbytes)
    monkeypatch.setattr(WindowPlan, "snapshot", snapshotting)
    plan, _, _ = scheduler_for(tmp_path, videos=40)
    with ObjectStore(str(tmp_path / "cache"), half_the_clips(plan)) as store:
        plan, scheduler, _ = scheduler_for(tmp_path, videos=40, store=store, workers=2)
        refined = window_0_refined(scheduler)
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            with trio.fail_after(10):
                await refined.wait()
            nursery.cancel_scope.cancel()
    assert {kind for kind, _ in calls} == {"fits?", "snapshot"}
    assert all(thread != loop_thread for _, thread in calls), calls


async def test_a_task_joining_while_a_window_is_planned_in_parts_is_served_at_once(
        tmp_path, dataset_dir, monkeypatch):
    """A task joining a kept mount of 250,000 videos while its window 0 was planned in parts
    waited 689 s for its first batch (its registration waited for the rest of the window).
    It is registered at once, its batches made on demand until the window is whole (the
    bytes of a task planned from the start), then it joins the window."""
    in_parts(monkeypatch)
    cfg = load_task_config(write_config(tmp_path / "t0.yaml", task_config(dataset_dir)))
    key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    scans = {key: scan_dataset(*key)}
    service = make_service(plan_tasks([cfg], scans, k_epochs=2), scans=scans,
                           cache_dir=tmp_path)
    held, parts = rest_held(service.scheduler)
    text = yaml.safe_dump(task_config(dataset_dir, task="t1", seed=5))
    joining = load_task_config(write_config(tmp_path / "t1.yaml", yaml.safe_load(text)))

    async def read(iteration: int) -> bytes:
        service.opened_view("t1", 0, iteration)
        got = bytes(await service.read_view("t1", 0, iteration))
        service.released_view("t1", 0, iteration)
        return got

    try:
        async with serving(service):
            with trio.fail_after(20):
                await until(lambda: ("rest", 0) in parts)  # planning it, held
                await service.add_task(joining, text)
                plan = service.tasks["t1"]
                first = [await read(iteration) for iteration in range(2)]
            assert service.scheduler.book.rest_pending == {0} and not held.is_set()
            assert "t1" not in service.scheduler.book.plans
            held.set()
            with trio.fail_after(20):
                await until(lambda: "t1" in service.scheduler.book.plans)
                last = await read(plan.iterations_per_epoch - 1)
            assert service.scheduler.board.is_planned(
                view_key(plan, 0, plan.iterations_per_epoch - 1)) or last
    finally:
        held.set()
    assert first == [reference_view(plan, 0, iteration) for iteration in range(2)]
    assert last == reference_view(plan, 0, plan.iterations_per_epoch - 1)


async def test_a_task_removed_before_it_joined_never_joins(tmp_path, monkeypatch):
    """A task registered while a window is planned in parts and removed before the window is
    whole leaves nothing: it never joins the windows, and a task of its name registered again
    joins as a new one."""
    in_parts(monkeypatch)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    held, parts = rest_held(scheduler)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            with trio.fail_after(10):
                await until(lambda: ("rest", 0) in parts)
                gone = joining_task(tmp_path, plan)
                await scheduler.add_plan(gone)  # returns at once: the rest is held
                scheduler.opened(gone.name, 0, 0)  # its reads are made on demand meanwhile
                await scheduler.remove_plan(gone.name)
            assert scheduler.planner.joining_later == {}
            held.set()
            await settle(scheduler)
            assert gone.name not in scheduler.book.plans
            (tmp_path / "again").mkdir()
            again = joining_task(tmp_path / "again", plan)
            with trio.fail_after(10):
                await scheduler.add_plan(again)
            assert scheduler.book.plans[again.name] is again
            nursery.cancel_scope.cancel()
    finally:
        held.set()
