"""A window planned in parts becomes whole while its readers pause, the workers busy: its
parts are swept from its start at the planner's share (`parts.SweepPace`), never while a
reader waits, and a reader coming meanwhile has its own part planned first
(docs/design.md#planning-ahead)."""

from __future__ import annotations

import threading
import time

import trio

from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, ListedVideo
from sandfs.plan.window import view_key
from sandfs.sched import planning as planning_module
from sandfs.sched import work
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


def test_the_sweep_takes_its_share_and_sizes_its_parts_to_take_part_s():
    """After a part of t seconds the next waits t at a share of one half (none at the default,
    1). The next part is this one's batches scaled by `part_s` over its seconds: a part at 8x
    `part_s` halved once was followed by 4x, 2x, then 1x; now by 1x at once. Growth is 4x a
    part at most. A part's seconds are the CPU `timed` counted (every step of it)."""
    pace = SweepPace(part_s=0.2)
    assert pace.due(0.0) and pace.batches == 0
    pace.planned(16, 9.95, now_s=10.0, share=0.5)
    assert not pace.due(10.04) and pace.due(10.05) and pace.batches == 64
    pace.planned(64, 18.4, now_s=20.0, share=0.5)  # 8x part_s
    assert pace.batches == 8 and pace.due(21.6)
    pace.planned(8, 29.9, now_s=30.0)
    assert pace.batches == 16
    pace.planned(1, 39.0, now_s=40.0)
    assert pace.batches == 1  # never below one batch (the readers' size: `WindowParts.next`)
    assert pace.timed(sum, range(10)) == 45 and pace.timed(sum, range(3)) == 3
    assert pace.cpu_s is not None and pace.cpu_s < 0.2
    pace.cpu_s = 0.4  # a part of 0.4 CPU-s (thread and merge) that load stretched to 2 s
    pace.planned(32, 38.0, now_s=40.0, share=0.5)
    assert pace.batches == 16 and not pace.due(40.3) and pace.due(40.4)
    assert pace.cpu_s is None  # the next part's count starts again
    off, back_to_back = SweepPace(), SweepPace()
    off.planned(16, 0.5, now_s=1.0, share=0)
    back_to_back.planned(16, 0.5, now_s=1.0)
    assert not off.due(1e9) and back_to_back.due(1.0)


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


def test_each_window_s_parts_keep_their_own_size(tmp_path):
    """One pace a planner grew its size on one window's cheap batches and used it for
    another's (a joining task's parts too): each `WindowParts` sizes its own."""
    plan = make_plan(tmp_path, videos=fake_videos(160), epochs=2, k_epochs=2)
    lead = {plan.listed[i].path for i in plan.batch_slots(0, 0)}
    grown, fresh = (WindowParts(0, lead, [plan.name]) for _ in range(2))
    grown.pace.planned(4, 0.0, now_s=0.01)
    assert grown.pace.batches == 16 and fresh.pace.batches == 0

    def swept(parts):
        return parts.next([plan], {plan.name: 0}, ahead=1, batches=1, sweep=lambda: True)

    assert swept(grown).batches == 16 and swept(fresh).batches == 1


async def test_a_swept_part_counts_the_cpu_of_its_planning_and_its_merge(tmp_path,
                                                                          monkeypatch):
    """A joining task's swept parts were sized by their wall time (its planning untimed), and
    no part counted its merge into the board on the trio thread (O(pending jobs)): every
    swept part, the window's own and a joiner's, counts its thread's CPU and its merge's,
    not the time its thread waited (here 0.1 s asleep; 0.05 CPU-s each)."""
    plan, scheduler = busy_window(tmp_path, monkeypatch)
    seen: list[tuple[float | None, float, bool]] = []
    planned, planner = SweepPace.planned, scheduler.planner

    def recording(pace, batches, started_s, now_s, share=1.0):
        joiner = any(pace is p.pace for g in planner._joiner_parts.values() for p in g.values())
        seen.append((pace.cpu_s, now_s - started_s, joiner))
        planned(pace, batches, started_s, now_s, share)

    def busy(step, asleep_s=0.0):  # 0.05 CPU-s more (and `asleep_s` of wall time)
        def slow(*args, **kwargs):
            time.sleep(asleep_s)
            started = time.thread_time()
            while time.thread_time() - started < 0.05:
                pass
            return step(*args, **kwargs)
        return slow

    monkeypatch.setattr(SweepPace, "planned", recording)
    monkeypatch.setattr(work, "plan_active_window", busy(work.plan_active_window, 0.1))
    monkeypatch.setattr(work, "plan_task_part", busy(work.plan_task_part, 0.1))
    board = scheduler.board
    board.add_window, board.add_part = busy(board.add_window), busy(board.add_part)
    joiner = joining_task(tmp_path, plan)
    async with trio.open_nursery() as nursery:
        await read_first(plan, scheduler, nursery)
        await scheduler.add_plan(joiner)
        with trio.fail_after(30):
            await until(lambda: not scheduler.book.rest_pending)
        nursery.cancel_scope.cancel()
    assert not planner._joiner_parts and {j for _, _, j in seen} == {False, True}, seen
    assert all(cpu is not None and 0.1 <= cpu < wall - 0.09 for cpu, wall, _ in seen), seen


async def test_parts_are_swept_at_a_share_while_the_tasks_read(tmp_path, monkeypatch):
    """Swept back to back beside a warm mount's reader (100,000 videos) the parts halved its
    batches/s: while a task of the window read within `READING_S`, a swept part of t CPU-s is
    followed by none for t * (1/READING_SHARE - 1); once its readers pause, back to back."""
    plan, scheduler = busy_window(tmp_path, monkeypatch)
    planner, shares = scheduler.planner, []
    planned = SweepPace.planned

    def recording(pace, batches, started_s, now_s, share=1.0):
        shares.append(share)
        planned(pace, batches, started_s, now_s, share)

    monkeypatch.setattr(SweepPace, "planned", recording)
    async with trio.open_nursery() as nursery:
        await read_first(plan, scheduler, nursery)  # read just now
        with trio.fail_after(10):
            await until(lambda: shares)
        nursery.cancel_scope.cancel()
    assert shares[0] == planning_module.READING_SHARE
    pace = planner._parts[0].pace
    assert not pace.due(trio.current_time())
    planner.book.read_at[plan.name] = time.monotonic() - planning_module.READING_S
    assert planner._sweep_share(0) == 1.0
    monkeypatch.setattr(planning_module, "SWEEP_SHARE", 0)
    assert planner._sweep_share(0) == 0
