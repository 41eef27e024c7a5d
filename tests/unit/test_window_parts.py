"""A large window planned in parts as its videos are probed (docs/contract.md#lazy-scan): a
reader past the first batches waits for its batch's part, not for the whole window; the views
are those of the window planned whole; and nothing of a window's pruning, nor the decision
whether it needs any, runs on the event loop."""

from __future__ import annotations

import os
import threading
from collections import Counter

import trio
import trio.testing
import yaml

from sandfs.cache import ObjectStore
from sandfs.config.loader import load_task_config
from sandfs.materialize import Materializer
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import write_test_video
from sandfs.plan import window as window_module
from sandfs.plan.mount import plan_tasks
from sandfs.plan.window import WindowPlan, view_key
from sandfs.sched import objects, work
from sandfs.sched import planning as planning_module
from sandfs.sched.scheduler import Scheduler
from sandfs.stats import Stats
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import make_service, serving
from tests.helpers.plans import build_plan, fake_videos, make_plan
from tests.helpers.reference import reference_view
from tests.unit.test_scheduler import (
    RecordingMaterializer,
    half_the_clips,
    joining_task,
    largest_pass_bytes,
    read_all,
    recording_windows,
    scheduler_for,
    settle,
    until,
    window_0_refined,
)


def in_parts(monkeypatch) -> None:
    monkeypatch.setattr(planning_module, "LEAD_CLIPS", 1)  # every window where a task stands
    monkeypatch.setattr(planning_module, "LEAD_BATCHES", 1)


def rest_held(scheduler) -> tuple[threading.Event, list]:
    """The window's last part (its rest) waits for the returned event; the parts planned go
    into the list as ("lead" | "part" | "rest", window)."""
    held, parts, planned = threading.Event(), [], scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        kind = "rest" if lead is None and skip else "part" if skip else "lead" if lead else ""
        parts.append((kind, window))
        if kind == "rest":
            held.wait(10)
        return planned(window, lead, skip, tasks)

    scheduler.planner.plan_active = planning
    return held, parts


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


def parts_recorded(scheduler) -> list[tuple[str, int]]:
    """Each part planned after the lead part, as (kind, videos): "part" or "rest"."""
    parts, planned = [], scheduler.planner.plan_active

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        if skip:
            parts.append(("rest" if lead is None else "part", len(lead or ())))
        return planned(window, lead, skip, tasks)

    scheduler.planner.plan_active = planning
    return parts


def workers_busy(scheduler, monkeypatch) -> None:
    """The workers never idle and no part is swept from the window's start while they are
    busy: parts are planned only as readers near their frontier."""
    scheduler.planner.idle = lambda: False
    monkeypatch.setattr(planning_module, "SWEEP_SHARE", 0)


def paced(tmp_path, monkeypatch, *, plan_ahead: int):
    """A window of 160 videos in parts of one batch's videos, planned only as readers come
    within `plan_ahead` batches of their frontier; (plan, scheduler, `parts_recorded`)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = plan_ahead
    return plan, scheduler, parts_recorded(scheduler)


async def first_batch_then_whole(plan, scheduler) -> list:
    """Read batch 0, then nothing: until the window is whole; the jobs pending then."""
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.opened(plan.name, 0, 0)
        with trio.fail_after(10):
            assert await scheduler.wait_view(view_key(plan, 0, 0), plan.name) is not None
            await until(lambda: 0 not in scheduler.book.rest_pending)
        pending = scheduler.pending_jobs()
        nursery.cancel_scope.cancel()
    return pending


async def test_parts_are_bounded_and_decode_each_video_once_a_window(tmp_path, monkeypatch):
    """Parts that doubled planned window 0 of 250,000 videos (1.25M clips) in the first
    minute, beside the readers' first batches. Each part holds the videos of PART_BATCHES
    batches at most, each video with all its clips: one pass a video a window."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    plan, scheduler, materializer = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    events = []
    recording_windows(scheduler, materializer, events)
    parts = parts_recorded(scheduler)
    await read_all(plan, scheduler)
    most = 2 * plan.sampling.videos_per_batch
    assert len(parts) >= 4 and parts[-1][0] == "rest", parts
    assert all(0 < size <= most for kind, size in parts[:-1] if kind == "part"), parts
    decoded = Counter(name for kind, name, *_ in events if kind == "decode")
    assert decoded == {v.name: 1 for v in plan.videos}  # k = 2 epochs: one window


async def test_a_part_finds_its_batches_without_walking_the_listing(tmp_path, monkeypatch):
    """Finding the batches that hold a part's videos walked the whole listing and each
    epoch's order (250,000 videos: 16 ms a part, as long as planning its clips): a part
    looks its videos' places up. Only the lead part, planned once, walks it."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    walked = []
    walk = window_module.lead_indices
    monkeypatch.setattr(window_module, "lead_indices",
                        lambda plan, lead: walked.append(len(lead)) or walk(plan, lead))
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    parts = parts_recorded(scheduler)
    await read_all(plan, scheduler)
    assert len([kind for kind, _ in parts if kind == "part"]) >= 3, parts
    assert walked == [plan.sampling.videos_per_batch]  # the lead part's one batch


async def test_the_rest_waits_while_readers_are_far_from_the_frontier(tmp_path, monkeypatch):
    """With the workers busy, a window's next part is planned only once a reader comes within
    `plan_ahead` batches of the batches planned: reading the first batches plans no more of
    the window than they need; reading on plans more."""
    plan, scheduler, parts = paced(tmp_path, monkeypatch, plan_ahead=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        for iteration in range(3):
            key = view_key(plan, 0, iteration)
            scheduler.opened(plan.name, 0, iteration)
            with trio.fail_after(10):
                assert await scheduler.wait_view(key, plan.name) is not None
        await settle(scheduler)
        assert scheduler.book.rest_pending == {0}
        planned = len(scheduler.book.windows[0].videos)
        assert planned <= 6 * plan.sampling.videos_per_batch < len(plan.videos), planned
        assert parts and all(kind == "part" for kind, _ in parts), parts
        nursery.cancel_scope.cancel()


async def test_whether_the_workers_idle_is_asked_only_when_no_reader_is_near(tmp_path,
                                                                            monkeypatch):
    """Asking ranks the pending jobs (2 ms at 100,000 videos), once per wake-up of the loop:
    not while a reader near its frontier has a part due anyway."""
    in_parts(monkeypatch)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    asked = []
    scheduler.planner.idle = lambda: asked.append(1) or False
    scheduler.planner.plan_ahead = 10 * plan.iterations_per_epoch  # always near
    views = await read_all(plan, scheduler)
    assert None not in views.values() and asked == []


async def test_the_rest_is_planned_while_the_workers_idle(tmp_path, monkeypatch):
    """No reader past the first batch: workers that would idle plan the window on, part by
    part from its start, until it is whole (the next window and pruning need it)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 2)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    scheduler.planner.plan_ahead = 1
    parts = parts_recorded(scheduler)
    await first_batch_then_whole(plan, scheduler)
    assert len(parts) >= 3 and parts[-1][0] == "rest", parts
    assert len(scheduler.book.windows[0].videos) == len(plan.videos)


async def test_the_rest_is_planned_while_memory_full_of_batches_holds_the_workers(
        tmp_path, monkeypatch):
    """A reader that stops (a long training step): the workers make batches ahead until
    memory is full and admission refuses the next job. The machine idles then, so the window
    is planned on until whole, though jobs wait to be started."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan, _, _ = scheduler_for(tmp_path, videos=160, epochs=2)
    memory = 4 * plan.view_nbytes(0, 0) + 2 * largest_pass_bytes(plan)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2,
                                       memory=memory)
    scheduler.planner.plan_ahead = 1
    pending = await first_batch_then_whole(plan, scheduler)
    assert pending  # the jobs refused, waiting for memory


def test_the_planner_plans_ahead_only_while_no_batch_is_waited_for(tmp_path):
    """A joining task's first batch (anticipated: demanded) waited 1.9 s at 100,000 videos
    beside parts planned for workers that had nothing else to do: while a batch is waited
    for, the workers are not idle to the planner."""
    plan, scheduler, _ = scheduler_for(tmp_path, videos=16, workers=2)
    assert scheduler._idle()  # nothing planned: nothing to run
    scheduler.board.anticipate(view_key(plan, 0, 0))
    assert not scheduler._idle()
    scheduler.board.unanticipate(view_key(plan, 0, 0))
    assert scheduler._idle()


async def test_a_reader_jumping_past_the_frontier_is_served(tmp_path, monkeypatch):
    """A reader that jumps to the window's last batch, far past the parts planned, has its
    batch's part planned from where it stands, and its bytes are the window's planned whole."""
    (tmp_path / "whole").mkdir()
    plan, scheduler, _ = scheduler_for(tmp_path / "whole", videos=160, epochs=2, workers=2)
    whole = await read_all(plan, scheduler)
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    (tmp_path / "parts").mkdir()
    plan, scheduler, _ = scheduler_for(tmp_path / "parts", videos=160, epochs=2, workers=2)
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 1
    last = plan.iterations_per_epoch - 1
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.opened(plan.name, 1, last)
        with trio.fail_after(10):
            got = await scheduler.wait_view(view_key(plan, 1, last), plan.name)
        assert scheduler.book.rest_pending == {0}
        nursery.cancel_scope.cancel()
    assert got is not None and bytes(got) == whole[1, last]


def two_trials(tmp_path, monkeypatch) -> tuple:
    """Two tasks on the same 160 videos from the start (a search's trials, other seeds),
    their window 0 planned in parts of one batch's videos: (plan, other, scheduler)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    plan = make_plan(tmp_path, videos=fake_videos(160), epochs=4, k_epochs=2)
    other = joining_task(tmp_path, plan)
    scheduler = Scheduler([plan, other], RecordingMaterializer(None), Stats(), workers=2,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2))
    return plan, other, scheduler


async def test_two_trials_window_in_parts_becomes_whole(tmp_path, monkeypatch):
    """The rest of a window planned in parts for two tasks on one dataset counted its videos
    twice, so it was never at most two parts' worth: once every video was planned no part was
    due and the window never whole (nor pruned, nor the next planned)."""
    plan, _, scheduler = two_trials(tmp_path, monkeypatch)
    scheduler.planner.plan_ahead = 1
    await first_batch_then_whole(plan, scheduler)


async def test_a_reader_jumping_to_the_next_window_has_the_rest_planned(tmp_path, monkeypatch):
    """The windows after one planned in parts wait until it is whole. One task's reader
    jumping to the next window while another reads the first slowly (no reader near the
    frontier, the workers busy) waited for ever: the rest is planned at once then."""
    plan, jumper, scheduler = two_trials(tmp_path, monkeypatch)
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 1
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            await until(lambda: scheduler.book.rest_pending == {0})
            scheduler.opened(plan.name, 0, 0)
            scheduler.opened(jumper.name, 2, 0)  # window 1
            got = await scheduler.wait_view(view_key(jumper, 2, 0), jumper.name)
        assert got is not None and 0 not in scheduler.book.rest_pending
        nursery.cancel_scope.cancel()


async def join_in_parts(tmp_path, plan, scheduler):
    """Once window 0 is planned in parts, a task of the same videos (another seed) joins."""
    with trio.fail_after(10):
        await until(lambda: scheduler.book.rest_pending == {0})
        later = joining_task(tmp_path, plan)
        await scheduler.add_plan(later)
    return later


async def test_a_task_joining_meanwhile_gets_its_own_parts(tmp_path, monkeypatch):
    """A task registered while a window is planned in parts joins at once with its own lead
    part (its first batches' videos), then parts as its readers come; the window's rest is
    not planned for it (at 250,000 videos that held its first batch 3.7 s)."""
    plan, scheduler, parts = paced(tmp_path, monkeypatch, plan_ahead=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        later = await join_in_parts(tmp_path, plan, scheduler)
        assert scheduler.book.plans["later"] is later
        with trio.fail_after(10):
            key = view_key(later, 0, 0)
            assert scheduler.board.is_planned(key)  # its lead part, not made on demand
            scheduler.opened("later", 0, 0)
            assert await scheduler.wait_view(key, "later") is not None
        await settle(scheduler)
        assert scheduler.book.rest_pending == {0} and ("rest", 0) not in parts, parts
        own = scheduler.planner._joiner_parts[0]["later"].planned
        assert 0 < len(own) < len(later.videos)
        nursery.cancel_scope.cancel()


async def test_a_joining_task_s_first_batch_comes_before_more_parts(tmp_path, monkeypatch):
    """A task joining a kept mount of 250,000 videos waited 2.8-3.9 s for its first batch:
    its next parts, and the other task's 64 batches ahead, were planned meanwhile on the cores
    its batch was decoded on (1.4-1.5 s once they waited). Until its first batch is made no
    part of its own is planned, even for a reader further on, and another task's only as its
    reader nears them (a part's batches); then both go on."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    gate = threading.Event()
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2, gate=gate)
    workers_busy(scheduler, monkeypatch)
    scheduler.planner.plan_ahead = 1
    planned, plan_active, plan_task_part = [], scheduler.planner.plan_active, work.plan_task_part

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        planned.append(plan.name)
        return plan_active(window, lead, skip, tasks)

    def joiner_planning(task_plan, *args):
        planned.append(task_plan.name)
        return plan_task_part(task_plan, *args)

    monkeypatch.setattr(work, "plan_task_part", joiner_planning)
    gate.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.opened(plan.name, 0, 0)
        with trio.fail_after(10):
            assert await scheduler.wait_view(view_key(plan, 0, 0), plan.name) is not None
        gate.clear()  # no batch is made from here until it is set (or 5 s)
        later = await join_in_parts(tmp_path, plan, scheduler)
        scheduler.planner.plan_active, planned[:] = planning, []
        scheduler.planner.plan_ahead = 8  # the other task's next part is due
        scheduler.opened("later", 0, 1)  # a reader ahead of its first batch
        scheduler.wake()
        await trio.sleep(0.3)
        assert planned == []
        gate.set()
        with trio.fail_after(10):
            assert await scheduler.wait_view(view_key(later, 0, 1), "later") is not None
        assert {plan.name, "later"} <= set(planned)
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


async def test_a_bad_video_s_slots_are_planned_with_its_part(tmp_path, monkeypatch):
    """A bad video's slots hold its stand-in's clips. A part holding the bad video skipped
    them (its stand-in was not in the part), the stand-in's part did not look at the bad one's
    batches, and the rest skipped both: the batch was never made and its reader, and the
    daemon's unmount after it, waited for ever. Every batch is made, with the bytes planned."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    root, sources = tmp_path / "videos", []
    for i in range(6):
        sources.append(tmp_path / f"source{i}.mp4")
        write_test_video(sources[-1], num_frames=12, width=64, height=48, gop=6, seed=i)
    root.mkdir()
    for i in range(48):
        os.link(sources[i % len(sources)], root / f"v{i:03d}.mp4")
    (root / "v007.mp4").unlink()
    (root / "v007.mp4").write_bytes(b"not a video" * 100)
    config = write_config(tmp_path / "t.yaml", task_config(root, epochs=2, sampling={
        "frames_per_video": 2, "frame_stride": 1}))
    plan = build_plan(config)
    scheduler = Scheduler([plan], Materializer(Stats()), Stats(), workers=2,
                          memory_limit_bytes=1 << 30, limiter=trio.CapacityLimiter(2))
    scheduler.planner.plan_ahead = 1
    with trio.fail_after(30):
        views = await read_all(plan, scheduler)
    assert views == {(e, i): reference_view(plan, e, i) for e in range(2)
                     for i in range(plan.iterations_per_epoch)}
    window = scheduler.book.windows[0]  # each clip once among its video's uses (pruning's)
    uses = Counter((u.view, u.slot) for w in window.videos.values() for u in w.uses)
    assert uses == Counter((key, slot) for key, view in window.view_plans.items()
                           for slot in range(len(view.clips)))


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
    waited for the rest of the window (689 s, then 3.7 s planned at once). It joins at once,
    with parts of its own; its batches, read while the window is in parts and once it is
    whole, are those of a task planned from the start."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", 1)
    cfg = load_task_config(write_config(tmp_path / "t0.yaml", task_config(dataset_dir)))
    key = (cfg.dataset.video_dataset_path, cfg.dataset.extensions)
    scans = {key: scan_dataset(*key)}
    service = make_service(plan_tasks([cfg], scans, k_epochs=2), scans=scans,
                           cache_dir=tmp_path)
    planner = service.scheduler.planner
    workers_busy(service.scheduler, monkeypatch)
    planner.plan_ahead = 1
    text = yaml.safe_dump(task_config(dataset_dir, task="t1", seed=5))
    joining = load_task_config(write_config(tmp_path / "t1.yaml", yaml.safe_load(text)))

    async def read(iteration: int) -> bytes:
        service.opened_view("t1", 0, iteration)
        got = bytes(await service.read_view("t1", 0, iteration))
        service.released_view("t1", 0, iteration)
        return got

    async with serving(service):
        with trio.fail_after(20):
            await until(lambda: service.scheduler.book.rest_pending == {0})
            await service.add_task(joining, text)
            plan = service.tasks["t1"]
            first = [await read(iteration) for iteration in range(2)]
        assert service.scheduler.book.rest_pending == {0}
        planner.idle = lambda: True
        service.scheduler.wake()
        with trio.fail_after(20):
            await until(lambda: 0 not in service.scheduler.book.rest_pending)
            last = await read(plan.iterations_per_epoch - 1)
    assert first == [reference_view(plan, 0, iteration) for iteration in range(2)]
    assert last == reference_view(plan, 0, plan.iterations_per_epoch - 1)


async def test_a_task_removed_while_its_parts_are_planned_leaves_nothing(tmp_path,
                                                                          monkeypatch):
    """A task that joined while a window is planned in parts and is removed before its part
    of the window is whole leaves nothing: the window is whole without it, and a task of its
    name registered again joins as a new one."""
    plan, scheduler, _ = paced(tmp_path, monkeypatch, plan_ahead=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        gone = await join_in_parts(tmp_path, plan, scheduler)
        assert gone.name in scheduler.planner._joiner_parts[0]
        with trio.fail_after(10):
            await scheduler.remove_plan(gone.name)
        assert gone.name not in scheduler.planner._joiner_parts.get(0, {})
        assert not any(task == gone.name for task, _ in scheduler.planner._own_views)
        scheduler.planner.idle = lambda: True
        scheduler.wake()
        with trio.fail_after(10):
            await until(lambda: not scheduler.book.rest_pending)
        assert all(task != gone.name for readers in scheduler.book.windows[0].readers.values()
                   for task, _ in readers)
        (tmp_path / "again").mkdir()
        again = joining_task(tmp_path / "again", plan)
        with trio.fail_after(10):
            await scheduler.add_plan(again)
        assert scheduler.book.plans[again.name] is again
        nursery.cancel_scope.cancel()


async def test_a_reader_jumping_ahead_then_back_is_served_while_the_workers_are_busy(
        tmp_path, monkeypatch):
    """A reader's frontier only grew: one that read batch 0, then 30, then 10 had batch 10
    planned only once the workers idled."""
    plan, scheduler, _ = paced(tmp_path, monkeypatch, plan_ahead=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            for iteration in (0, 30, 10, 11, 12):
                key = view_key(plan, 0, iteration)
                scheduler.opened(plan.name, 0, iteration)
                assert (scheduler.ready_view(key, plan.name)
                        or await scheduler.wait_view(key, plan.name)) is not None
                scheduler.released(plan.name, 0, iteration)
        assert scheduler.book.rest_pending == {0}  # the workers never idled
        nursery.cancel_scope.cancel()
