"""A window planned in parts becomes whole while its readers pause, the workers busy: its
parts are swept from its start at the planner's share (`parts.SweepPace`), never while a
reader waits, and a reader coming meanwhile has its own part planned first
(docs/design.md#planning-ahead)."""

from __future__ import annotations

import threading

import trio

from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, ListedVideo
from sandfs.plan.window import view_key
from sandfs.sched import planning as planning_module
from sandfs.sched.parts import REST, SweepPace, WindowParts
from tests.helpers.plans import fake_videos, make_plan
from tests.unit.test_scheduler import joining_task, scheduler_for
from tests.unit.test_window_parts import in_parts, until


def swept_parts(scheduler, hold: threading.Event | None = None, held: int = 1,
                held_at: list | None = None) -> list[tuple[bool, frozenset]]:
    """Each part after the lead part as (swept, videos), recorded as its planning starts; the
    `held`-th swept one waits for `hold` (set) in its thread, the jobs done then in
    `held_at`."""
    parts, planned = [], scheduler.planner.plan_active
    held_at = [] if held_at is None else held_at

    def planning(window, lead=None, skip=frozenset(), tasks=None):
        if skip:
            swept = bool(getattr(lead, "swept", False))
            parts.append((swept, frozenset(lead or ())))
            if swept and hold is not None and sum(s for s, _ in parts) == held:
                held_at.append(scheduler.jobs_done)
                assert hold.wait(10)
        return planned(window, lead, skip, tasks)

    scheduler.planner.plan_active = planning
    return parts


def busy_window(tmp_path, monkeypatch, part_batches: int = 1):
    """160 videos, window 0 in parts of `part_batches` batches' videos for readers, planned
    ahead one batch; the workers never idle (to the planner)."""
    in_parts(monkeypatch)
    monkeypatch.setattr(planning_module, "PART_BATCHES", part_batches)
    plan, scheduler, _ = scheduler_for(tmp_path, videos=160, epochs=2, workers=2)
    scheduler.planner.idle = lambda: False
    scheduler.planner.plan_ahead = 1
    return plan, scheduler


async def read_first(plan, scheduler, nursery) -> None:
    """The scheduler started in `nursery`, batch 0 read and released: the reader pauses."""
    await nursery.start(scheduler.run)
    scheduler.opened(plan.name, 0, 0)
    with trio.fail_after(10):
        assert await scheduler.wait_view(view_key(plan, 0, 0), plan.name) is not None
    scheduler.released(plan.name, 0, 0)


async def test_a_window_becomes_whole_while_its_reader_pauses_and_the_workers_are_busy(
        tmp_path, monkeypatch):
    """A cold mount of 250,000 videos whose reader stopped after 120 batches had 10% of
    window 0 unplanned after 400 s: parts came only as its reader came, or once the workers
    idled, and they decoded the planned videos first. The parts are swept from the window's
    start while no reader waits, in parts that grow while they plan fast."""
    plan, scheduler = busy_window(tmp_path, monkeypatch)
    parts = swept_parts(scheduler)
    async with trio.open_nursery() as nursery:
        await read_first(plan, scheduler, nursery)
        with trio.fail_after(10):
            await until(lambda: not scheduler.book.rest_pending)
        nursery.cancel_scope.cancel()
    swept = [len(videos) for is_swept, videos in parts if is_swept]
    assert len(swept) >= 2 and max(swept) > plan.sampling.videos_per_batch, parts
    assert len(scheduler.book.windows[0].videos) == len(plan.videos)


async def test_a_reader_coming_while_parts_are_swept_has_its_part_first(tmp_path,
                                                                          monkeypatch):
    """A reader that comes to a batch far ahead while a swept part is planned waits for that
    part only: the next part is its batch's, not the sweep's."""
    plan, scheduler = busy_window(tmp_path, monkeypatch)
    hold = threading.Event()
    parts = swept_parts(scheduler, hold)
    last = plan.iterations_per_epoch - 1
    far = {plan.listed[i].path for i in plan.batch_slots(0, last)}
    async with trio.open_nursery() as nursery:
        await read_first(plan, scheduler, nursery)
        with trio.fail_after(10):
            await until(lambda: any(swept for swept, _ in parts))
            scheduler.opened(plan.name, 0, last)  # while the swept part is planned
            hold.set()
            got = await scheduler.wait_view(view_key(plan, 0, last), plan.name)
        nursery.cancel_scope.cancel()
    assert got is not None
    swept, videos = parts[1]
    assert not swept and far - parts[0][1] <= videos, parts[:2]


async def test_jobs_start_beside_a_swept_part(tmp_path, monkeypatch):
    """Beside a planning thread only the jobs readers wait for start; parts swept back to back
    then left the workers idle. A swept part holds no reader's batch: every job starts, here
    those of the next batches' part (4 batches, 2 workers) while the first swept part waits."""
    plan, scheduler = busy_window(tmp_path, monkeypatch, part_batches=4)
    scheduler.planner.plan_ahead = 2  # batches 1-4's part comes before the sweep's
    hold, done = threading.Event(), []
    swept_parts(scheduler, hold, held_at=done)
    async with trio.open_nursery() as nursery:
        await read_first(plan, scheduler, nursery)
        with trio.fail_after(10):
            await until(lambda: done)  # the jobs done as the swept part began
            await until(lambda: scheduler.jobs_done >= done[0] + 3)
        assert scheduler.planner.sweeping and not hold.is_set()
        hold.set()
        nursery.cancel_scope.cancel()


def test_the_sweep_takes_its_share_and_sizes_its_parts_by_their_cpu():
    """After a part of t seconds the next waits t at a share of one half (none at the default,
    1); a part twice as fast as `part_s` doubles the next, one slower halves it, never below
    the readers' size. A part's seconds are its planning thread's CPU where `timed`."""
    pace = SweepPace(16, share=0.5, part_s=0.2)
    assert pace.due(0.0)
    pace.planned(9.95, now_s=10.0)
    assert not pace.due(10.04) and pace.due(10.05) and pace.batches == 32
    pace.planned(19.85, now_s=20.0)
    assert pace.batches == 32 and pace.due(20.15)
    for _ in range(3):
        pace.planned(29.5, now_s=30.0)
    assert pace.batches == 16
    assert pace.timed(sum, range(10)) == 45 and pace.cpu_s is not None
    pace.cpu_s = 0.5  # a part of 0.5 CPU-s that a loaded machine stretched to 2 s
    pace.planned(38.0, now_s=40.0)
    assert pace.batches == 16 and not pace.due(40.4) and pace.due(40.5)
    off, back_to_back = SweepPace(16, share=0), SweepPace(16)
    back_to_back.planned(0.5, now_s=1.0)
    assert not off.due(0.0) and back_to_back.due(1.0)


async def test_no_part_is_swept_while_a_reader_waits_or_videos_wait_for_their_probes(tmp_path):
    """A swept part waiting for its videos' probes (a cold mount's scan still running) would
    hold a reader's next part back as long: the workers busy, the sweep waits for the scan,
    and for no reader waiting for a batch."""
    plan, scheduler, _ = scheduler_for(tmp_path, videos=16, workers=2)
    planner = scheduler.planner
    planner.idle = lambda: False
    assert planner._sweeps([plan])
    scheduler.board.anticipate(view_key(plan, 0, 0))
    assert not planner._sweeps([plan])
    scheduler.board.unanticipate(view_key(plan, 0, 0))
    listed = [ListedVideo(f"v{i}", f"v{i}.mp4", f"/d/v{i}.mp4", 1, 0) for i in range(3)]
    book = ProbeBook(listed)
    book.defer("v0.mp4", lambda: None)
    book.record("v1.mp4", BadVideo("v1.mp4", "open_invalid", ""))
    plan.probes = book
    assert not book.all_known() and not planner._sweeps([plan])
    book.record("v2.mp4", BadVideo("v2.mp4", "open_invalid", ""))
    assert book.all_known() and planner._sweeps([plan])


async def test_no_part_is_swept_while_a_task_joins(tmp_path, monkeypatch):
    """A task joining a kept mount waits for the planner's lock: a swept part holding it would
    add its seconds to the task's first batch."""
    plan, scheduler = busy_window(tmp_path, monkeypatch)
    planner, entered = scheduler.planner, trio.Event()
    assert planner._sweeps([plan])
    resolve = planner._resolve_lead

    async def resolving(joining):
        entered.set()
        await trio.sleep(0.2)
        return await resolve(joining)

    planner._resolve_lead = resolving
    async with trio.open_nursery() as nursery:
        nursery.start_soon(planner.add_plan, joining_task(tmp_path, plan))
        await entered.wait()
        assert not planner._sweeps([plan])
    assert planner._sweeps([plan])


def test_a_sweep_within_two_of_its_parts_of_the_end_plans_the_rest(tmp_path):
    """Its parts had grown to thousands of batches while the rest was held back until two
    readers' parts (256 videos at 250,000) were left: each swept part walked ever more planned
    batches for ever fewer videos. Two swept parts' worth left: the rest, at once."""
    plan = make_plan(tmp_path, videos=fake_videos(160), epochs=2, k_epochs=2)
    parts = WindowParts(0, {plan.listed[i].path for i in plan.batch_slots(0, 0)}, [plan.name])

    def due(sweep_batches: int):
        return parts.next([plan], {plan.name: 0}, ahead=1, batches=1, sweep=lambda: True,
                          sweep_batches=sweep_batches)

    left = len(plan.listed) - len(parts.planned)
    small = due(1)
    assert small is not REST and small.swept and len(small) <= plan.sampling.videos_per_batch
    assert due(-(-left // (2 * plan.sampling.videos_per_batch))) is REST


async def test_a_failed_batch_a_reader_waited_for_does_not_stop_the_sweep(tmp_path):
    """A batch that failed (EIO) stayed demanded once its reader had its error: the sweep
    (and the planner's idle test) saw a reader waiting until the window's end, and the window
    stayed in parts."""
    plan, scheduler, _ = scheduler_for(tmp_path, videos=16, workers=2)
    planner, board = scheduler.planner, scheduler.board
    planner.idle = lambda: False
    assert planner._sweeps([plan])
    key = view_key(plan, 0, 0)
    board.wait_started(key)
    board.fail(key, "decode failed")
    board.wait_ended(key)
    assert not board.demanded and planner._sweeps([plan])
    board.anticipate(view_key(plan, 0, 1))  # one anticipated, then failed in its planning
    board.fail(view_key(plan, 0, 1), "could not be planned")
    assert not board.demanded and planner._sweeps([plan])
