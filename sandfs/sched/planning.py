"""Window planning for the scheduler: which k-epoch windows are planned (the current and next
of each task, and those further ahead to carry frames for), each joining task's part of them,
pruning what a window keeps on disk, and the batches a task's reader is anticipated at.

A window or part slow to plan (thousands of videos) has its first batches made before the next
is planned (`first_batches_first`): planning the next would hold their passes back as long
again (docs/performance.md#planning-and-scheduling-at-scale). A large window where a task stands is
planned in parts: the videos of the task's next batches (each with all its clips in the
window, so it is still decoded once), whose batches are made first, then parts that follow the
readers (`parts.next_part`), then the rest. The planner says which; the scheduler runs their
jobs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Container, Iterable
from functools import partial
from types import MappingProxyType
from typing import TypeVar

import trio

from sandfs.cache import ObjectStore
from sandfs.plan.failures import ViewFailures
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import (
    STOP_PLANNING,
    PlanningStopped,
    ViewKey,
    WindowPlan,
    plan_window,
)
from sandfs.runtime import settle_collector
from sandfs.sched import work
from sandfs.sched.anticipation import Anticipation
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.jobs import VideoJobKey
from sandfs.sched.joining import TaskJoins
from sandfs.sched.parts import REST, SweepPace, WindowParts, lead_part, timed_by
from sandfs.sched.pruning import window_pruned
from sandfs.sched.trims import HeapTrims
from sandfs.sched.windows import WindowBook
from sandfs.threads import limiter, stop_when_cancelled

log = logging.getLogger(__name__)
T = TypeVar("T")

# A window that takes this long to plan (1,000 short videos: 0.2 s) has its first batches made
# before the next window is planned, when their videos are at most 1/FIRST_BATCHES_VIDEO_SHARE
# of the window's; never longer than `joining.FIRST_BATCHES_WAIT_S`.
FIRST_BATCHES_FIRST_S = 0.1
FIRST_BATCHES_VIDEO_SHARE = 8
# A window where a task stands with this many clips or more (about 0.15 s to plan) is planned in
# parts: the videos of each such task's next LEAD_BATCHES batches, then PART_BATCHES batches'
# at a time (`_due_part`).
LEAD_CLIPS = 4_000
LEAD_BATCHES = 4
PART_BATCHES = 16
# While a task of the window read within READING_S, its parts are swept at READING_SHARE of the
# time at most: back to back beside a warm mount's reader (100,000 videos) they halved its
# batches/s (docs/performance.md#the-sweep-on-a-warm-mount).
READING_S = 2.0
READING_SHARE = 0.1
# Of the time, swept parts while the workers are busy (0: none, where tests want parts
# planned only as readers come)
SWEEP_SHARE = 1.0


class WindowPlanner(TaskJoins, Anticipation):
    def __init__(self, book: WindowBook, board: BatchBoard, carry: CarryBook,
                 failures: ViewFailures, store: ObjectStore | None, prune_mode: str, *,
                 wake: Callable[[], None],
                 on_window_planned: Callable[[], None] | None = None,
                 while_planning: Callable[[], Awaitable[None]] | None = None,
                 freezes_windows: bool = False, plan_ahead: int = 64,
                 idle: Callable[[], bool] = lambda: True) -> None:
        self.book, self.board, self.carry, self.failures = book, board, carry, failures
        self.store, self.prune_mode = store, prune_mode
        self.wake = wake  # the scheduler's: something to dispatch
        self.on_window_planned = on_window_planned
        self.while_planning = while_planning  # run beside each planning thread, then cancelled
        self.freezes_windows = freezes_windows  # Scheduler's
        # batches a reader may come within of its window's planned frontier before the next
        # part is planned; `idle`: whether the workers would otherwise idle (the scheduler's)
        self.plan_ahead, self.idle = plan_ahead, idle
        # a swept part planned now; tasks joining (until their first batches are made)
        self.sweeping, self._joining = False, 0
        self._timing: SweepPace | None = None  # the swept part's, while it is planned
        # the windows in `book.rest_pending`: their own tasks' parts, and those of tasks that
        # joined meanwhile (by task); and the batches each such task added (by task, window)
        self._parts: dict[int, WindowParts] = {}
        self._joiner_parts: dict[int, dict[str, WindowParts]] = {}
        self._own_views: dict[tuple[str, int], set[ViewKey]] = {}
        self.anticipated: dict[str, ViewKey] = {}  # a task's next batch, before its reader came
        self.window_added = trio.Event()  # set (and replaced) each time a window is planned
        self.nursery: trio.Nursery | None = None  # the scheduler's, once it runs
        self._readers_came: set[str] = set()
        self._first_batches: set[ViewKey] = set()  # made before the next window is planned
        self._pruning = trio.CapacityLimiter(1)  # one window's Algorithm 1 at a time
        self._planning = 0  # windows and parts being planned in threads now
        self._quiet = threading.Event()  # set while none is: pruning goes on
        self._quiet.set()
        # held while a window is planned in a thread from the tasks of the book, and by tasks
        # joining and leaving: a window planned for a task removed meanwhile kept its readers,
        # and the dispatcher's deadlines looked the task up (KeyError)
        self.tasks_steady = trio.Lock()
        self._trims = HeapTrims()

    # -- windows ----------------------------------------------------------------------------

    async def activate(self) -> set[ViewKey]:
        """Plan the wanted windows; forget those behind them that no reader needs now (a
        window ahead of the tasks, planned for a reader that jumped there, stays). A large
        window where a task stands is planned in two parts, its first batches' videos first
        (`_lead_videos`). Before the rest of a window planned in part, or a window after one
        slow to plan, it stops and returns the first batches: the caller makes them, then asks
        again (an empty set: all planned). A window a reader came to while the windows ahead
        were planned is planned too: the reader's wake-up went to the dispatcher beside that
        planning, and nothing would have woken the scheduler for it again."""
        while True:
            first = await self._activate_once()
            if first or not self.unplanned() or self.book.rest_pending:
                return first

    def unplanned(self) -> set[int]:
        """Wanted windows not planned (or planned in part) yet."""
        return self.book.rest_pending | (self.book.wanted() - set(self.book.windows))

    async def _activate_once(self) -> set[ViewKey]:
        wanted, waiting = self.book.wanted(), set()  # windows held back by parts not due
        for window in [w for w in self.book.windows if w < min(wanted, default=0)]:
            self._drop_window(window)  # behind every reader: never finished (a rest: seconds)
        while todo := (self.book.rest_pending | (wanted - set(self.book.windows))) - waiting:
            # a lead part's rest before the windows after it; owners take turns
            window = self.book.next_to_plan(todo)
            if self._first_batches:
                first, self._first_batches = self._first_batches, set()
                return first
            started = trio.current_time()
            async with self.tasks_steady:
                if window in self.book.rest_pending:
                    due = self._due_part(window)
                    if due is None:  # no reader near its frontier, and the workers busy
                        waiting |= self._held_back(window)
                        continue
                    planned = await self._plan_due(window, *due)
                    if window in self.book.rest_pending:  # a part: its jobs start, then more
                        self.wake()
                        return set()
                else:
                    lead = self._lead_videos(window)
                    tasks = [p.name for p in self.book.planned_plans(window)]
                    planned = await self._plan_in_thread(self.plan_active, window, lead)
                    if lead is not None:
                        self.book.rest_pending.add(window)
                        self._parts[window] = WindowParts(window, lead, tasks)
                    self._add_window(planned)
                    if lead is not None:
                        self._first_batches = self._waited_batches(planned.plan)
                        continue
                    self._trim()  # its planning freed ~60 bytes a clip (250,000 videos: ~75 MB)
            if planned is not None:
                self._first_batches = self._first_batches_first(
                    self.book.windows[window], trio.current_time() - started)
        self._drop_stale_future()  # whether a window waits or not (250,000 videos: ~58 MB each)
        if waiting:  # the windows to carry for follow once the parts are planned
            return set()
        await self._plan_future()
        return set()

    async def _plan_in_thread(self, plan: Callable[..., T], *args: object) -> T:
        """Plan in a thread, `while_planning` beside it (the scheduler's: jobs for blocked
        readers); pruning waits meanwhile. Both are pure Python and share one GIL: at 10,000
        videos a joining task's first part took 13 s beside pruning's 18 s, against 2 s alone;
        pruning only refines what the jobs keep on disk."""
        self._planning += 1
        self._quiet.clear()
        stop = threading.Event()  # set once this call is cancelled: the thread stops early
        asked = STOP_PLANNING.set(stop.is_set)  # the thread runs in a copy of this context
        try:
            failed: Exception | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_cancelled, stop)
                if self.while_planning is not None:
                    nursery.start_soon(self.while_planning)
                try:
                    planned = await trio.to_thread.run_sync(timed_by(self._timing, plan), *args,
                                                            limiter=limiter("planning"))
                except PlanningStopped:
                    await trio.lowlevel.checkpoint()  # cancelled: raises Cancelled
                    raise
                except Exception as error:  # raised below as it is, not in an exception group
                    failed = error
                nursery.cancel_scope.cancel()
            if failed is not None:
                raise failed
            return planned
        finally:
            STOP_PLANNING.reset(asked)
            self._planning -= 1
            if not self._planning:
                self._quiet.set()

    def plan_active(self, window: int, lead: Container[str] | None = None,
                    skip: Container[str] = frozenset(), tasks: Container[str] | None = None
                    ) -> work.PlannedWindow:
        """In a thread: the window's plan (or its lead part, a next part, or its rest: of
        `tasks`), what is on disk, and what to keep there. A part uses the batches its window
        resolved."""
        resolved = self.book.windows[window].view_plans if skip else MappingProxyType({})
        plans = [p for p in self.book.planned_plans(window) if tasks is None or p.name in tasks]
        planned = work.plan_active_window(plans, window, self.store, self.prune_mode, lead=lead,
                                          skip=skip, resolved=resolved,
                                          settle=self.freezes_windows)
        if self.on_window_planned is not None:
            try:
                self.on_window_planned()
            except OSError as exc:  # the checkpoint on a full disk: planning goes on
                log.warning("window %d: checkpointing the plan state failed (%s): a restart "
                            "may plan it again differently", window, exc)
        return planned

    async def window_planned(self, task: str, epoch: int, key: ViewKey | None = None) -> None:
        """Wait while the window of the task's `epoch` is wanted but still being planned (a
        reader that just jumped there), or the task's part of it is (`add_plan`), or (planned
        in parts) the task's part with batch `key` is not: computing its view on demand
        meanwhile would decode it twice. A batch the window made already (another task's,
        gone from memory) is made on demand."""
        window = self.book.window_of_task(task, epoch)
        while window is not None and (
                (window not in self.book.windows and window in self.book.wanted())
                or (self._in_parts(task, window)
                    and (key is None or not (self.board.is_planned(key)
                                             or self.book.view(key) is not None)))
                or window in self.book.parts_pending.get(task, ())):
            self.wake()
            await self.window_added.wait()

    # -- windows planned in two parts ---------------------------------------------------------

    def _lead_videos(self, window: int, tasks: Iterable[TaskPlan] | None = None
                     ) -> frozenset[str] | None:
        """`parts.lead_part` of the window's tasks (of `tasks`). 10,000 short videos: the first
        window took 1.8 s to plan before any of its passes could start, a joining task's part
        as long before its first batch."""
        plans = self.book.plans.values() if tasks is None else tasks
        return lead_part(plans, self.book.positions, window, LEAD_CLIPS, LEAD_BATCHES)

    def _due_part(self, window: int) -> tuple[str | None, frozenset[str]] | None:
        """The next part of a window planned in parts, `WindowParts.next`'s of its own tasks
        (None) or of a task that joined meanwhile (its name); None: none is due (no reader
        within `plan_ahead` batches of its frontier, and no sweep now: `_sweeps`). Walks its
        few batches past the frontiers, on the trio thread. A reader standing in a later
        window not planned yet waits for this one whole: its parts' rest, at once."""
        plans = self.book.planned_plans(window)
        own = self._parts.get(window)
        groups = [(None, own)] if own is not None else []
        waited = self.book.stands_in_any(self._held_back(window) - {window})
        for owner, parts in [*groups, *self._joiner_parts.get(window, {}).items()]:
            if parts.leading:  # its lead part is being planned: a rest now plans it twice
                continue
            part = REST if waited else parts.next(
                plans, self.book.positions, ahead=self._ahead(), batches=PART_BATCHES,
                sweep=partial(self._sweeps, plans, parts.pace))
            if part is not None:
                return owner, part
        return None

    def _ahead(self) -> int:
        """How far ahead of a reader its parts are planned: while a task joins (until its
        first batches are made) only as far as a part's batches, so that planning leaves the
        cores to those batches; `plan_ahead` otherwise."""
        return min(self.plan_ahead, PART_BATCHES) if self._joining else self.plan_ahead

    def _sweeps(self, plans: Iterable[TaskPlan], pace: SweepPace | None = None) -> bool:
        """May a part come from a window's start? Not while a reader waits or a task joins;
        at `pace`'s share once the tasks' videos are all probed (a part waiting for probes
        holds a reader's part back); at once where the workers would idle."""
        if self.board.demanded or self._joining:
            return False
        due = SWEEP_SHARE > 0 and (pace is None or pace.due(trio.current_time()))
        return (due and all(p.probes.all_known() for p in plans)) or self.idle()

    def _held_back(self, window: int) -> set[int]:
        """`WindowBook.held_back` by a window in parts, for the tasks of its parts."""
        return self.book.held_back(window, {n for p in self._groups(window) for n in p.tasks})

    async def _plan_due(self, window: int, owner: str | None, part: frozenset[str]
                        ) -> work.PlannedWindow | None:
        """`_due_part`'s part planned and merged in; the window whole once every part is."""
        swept, started = getattr(part, "swept", False), trio.current_time()
        self.sweeping, self._timing = swept, part.parts.pace if swept else None
        try:
            if owner is None:
                planned = await self._plan_rest(window, part)
            else:
                planned = None
                await self._plan_joiner_part(owner, window, part)
            self._whole_yet(window)
        finally:
            self.sweeping, self._timing = False, None
        if swept:
            pace, now = part.parts.pace, trio.current_time()
            pace.planned(part.batches, started, now, self._sweep_share(window))
            if self.nursery is not None and math.isfinite(pace.next_s) and pace.next_s > now:
                self.nursery.start_soon(self._wake_at, pace.next_s)  # the sweep due again
        return planned

    async def _wake_at(self, deadline: float) -> None:
        await trio.sleep_until(deadline)
        self.wake()

    def _sweep_share(self, window: int) -> float:
        """SWEEP_SHARE, or READING_SHARE at most while the window's tasks read."""
        now, read_at = time.monotonic(), self.book.read_at
        if any(now - read_at.get(p.name, -math.inf) < READING_S
               for p in self.book.planned_plans(window)):
            return min(SWEEP_SHARE, READING_SHARE)
        return SWEEP_SHARE

    def _in_parts(self, task: str, window: int) -> bool:
        """Is the task's part of the window still planned in parts?"""
        return any(task in parts.tasks for parts in self._groups(window))

    def _whole_yet(self, window: int) -> None:
        """A window planned in parts whose parts are all planned: whole, and pruned (whether
        it needs it is decided in the pruning thread: 250,000 videos, 1.2 s over its clips)."""
        if (window not in self.book.rest_pending or window in self._parts
                or self._joiner_parts.get(window)):
            return
        self.book.rest_pending.discard(window)
        self._joiner_parts.pop(window, None)
        self._note_window_added()
        if self.store is not None:
            self.nursery.start_soon(self._prune, self.book.windows[window], True)
        self._trim()  # its parts' plans, merged in

    def _waited_batches(self, plan: WindowPlan) -> set[ViewKey]:
        """The plan's batches readers wait for (or are anticipated at), not made yet: a lead
        part's are made before its rest is planned."""
        return {k for k in self.board.demanded if k in plan.views and k in self.board.views}

    async def _plan_rest(self, window: int, part: frozenset[str]) -> work.PlannedWindow | None:
        """The next part of a window planned in parts (`_due_part`), or its rest (`REST`):
        their batches and videos, merged in. A task joining or leaving meanwhile changes what
        the rest holds: the window is then planned again whole (None)."""
        parts = self._parts[window]
        tasks = {name: self.book.plans.get(name) for name in parts.tasks}
        planned = await self._plan_in_thread(self.plan_active, window,
                                             None if part is REST else part, parts.planned,
                                             parts.tasks)
        if window not in self.book.windows or any(
                self.book.plans.get(name) is not plan for name, plan in tasks.items()):
            if window in self.book.windows:
                self._drop_window(window)
            self._note_window_added()
            return None
        parts.add(part)
        if part is REST:
            self._parts.pop(window, None)
        timed_by(self._timing, self._add_window)(planned)
        return planned

    def _first_batches_first(self, plan: WindowPlan, planning_s: float) -> set[ViewKey]:
        """The batches waited for (or anticipated) in a window that took FIRST_BATCHES_FIRST_S
        or more to plan, when their videos are few next to the window's: planning the next
        window would take as long again before their passes could start. Their passes carry
        nothing for the next window, which decodes those few videos again."""
        if planning_s < FIRST_BATCHES_FIRST_S:
            return set()
        keys = self._waited_batches(plan)
        videos = {c.video_index for k in keys for c in self.board.views.state(k).view.clips}
        few = len(videos) * FIRST_BATCHES_VIDEO_SHARE <= len(plan.videos)
        return keys if few else set()

    def _drop_stale_future(self) -> None:
        """Forget the plans made to carry for windows that are active and whole now, or behind
        every task. A window in parts keeps its plan until it is whole: passes carry from it
        for the videos its parts have not planned yet (`WindowBook.later`)."""
        book = self.book
        keep = self._future_horizon() | book.rest_pending
        gone = set(book.future) - keep
        if gone:
            book.future = {w: p for w, p in book.future.items() if w in keep}
            self.carry.forget(gone - set(book.windows))

    def _future_horizon(self) -> set[int]:
        return self.book.horizon(self.carry.span) if self.store is not None else set()

    async def _plan_future(self) -> None:
        """Plan the windows a pass may carry for after each active one (`CarryBook.span`), for
        no other use than carrying their frames: a job of the next window, started early,
        carries for the windows after it."""
        book = self.book
        for window in sorted(self._future_horizon() - set(book.future)):
            async with self.tasks_steady:
                if window not in book.horizon(self.carry.span):  # a task left meanwhile
                    continue
                plans = book.planned_plans(window)
                future = await self._plan_in_thread(plan_window, plans, window)
                book.future[window] = future
                log.debug("window %d planned to carry for: %d videos", window, len(future.videos))

    def _add_window(self, planned: work.PlannedWindow) -> None:
        """A window planned (whole, or its lead part), or the rest of one planned in part. A
        rest is pruned with its window once whole; a whole window says if it needs pruning
        (`PlannedWindow.to_prune`, decided in its planning thread)."""
        plan, window = planned.plan, planned.plan.window
        rest = window in self.book.windows
        if rest:
            self._made_already(plan)
            self.book.extend(window, plan)
        else:
            self.book.add_window(plan)
        whole = self.book.windows[window]
        self.board.add_window(planned)
        if planned.to_prune:  # one whole from parts: `_whole_yet`
            self.nursery.start_soon(self._prune, whole)
        self._anticipate(whole)
        self._fail_views(plan)
        self.carry.note_on_disk({VideoJobKey(window, p) for p in planned.frames_on_disk},
                                [window])
        self._settle()  # the window's objects live as long as it
        self._note_window_added()
        log.debug("window %d planned%s: %d videos, %d views, %d clips on disk", window,
                  " (its rest)" if rest else "", len(plan.videos), len(plan.views),
                  sum(map(len, planned.on_disk.values())))

    def _made_already(self, rest: WindowPlan) -> None:
        """A window's rest holds every batch of the window; those its earlier parts made (in
        memory, or read and gone) leave it: planned again without a clip to make, a reader
        reading one back waited for ever rather than having it made on demand."""
        base = self.book.windows[rest.window]
        for key in [k for k in rest.views if k in base.views and k not in self.board.views]:
            del rest.views[key]

    async def _prune(self, plan: WindowPlan, unless_fits: bool = False) -> None:
        """Algorithm 1 for a window whose clips do not all fit on disk (`unless_fits`: first
        find out whether they do), beside its first jobs (10,000 short videos: 4 s of a
        thread). Jobs started meanwhile keep the soonest clips that fit; the others follow
        pruning. It reads a snapshot of the window taken in its thread (tasks join and leave
        meanwhile), waits while the planner plans, runs one window at a time, and is abandoned
        at shutdown. Nothing of it runs on the event loop: at 250,000 videos a window holds
        1.25M clips."""
        try:
            kept = await trio.to_thread.run_sync(
                window_pruned, plan, self.store.budget_bytes,
                self.prune_mode if unless_fits else None, self._quiet.wait,
                abandon_on_cancel=True, limiter=self._pruning)
        except Exception:
            log.exception("window %d: pruning failed; its jobs keep the soonest clips that fit",
                          plan.window)
            return
        self._trim()  # Algorithm 1's columns, a window's largest transient, freed
        if kept is not None and self.book.windows.get(plan.window) is plan:
            self.board.refine_disk_plans(plan.window, kept)

    def _settle(self) -> None:  # a window or part just planned lives long: not walked
        if self.freezes_windows:
            settle_collector()

    def _note_window_added(self) -> None:
        """Wake the readers waiting for a window (or a task's part of one)."""
        self.window_added.set()
        self.window_added = trio.Event()

    def _fail_views(self, plan: WindowPlan) -> None:
        """Views that could not be planned fail for their readers: EIO, reported per task,
        and logged once a window."""
        if plan.failed:
            key, first = next(iter(plan.failed.items()))
            log.warning("window %d: %d batches could not be planned (EIO), the first "
                        "%d/%d of %s: %s", plan.window, len(plan.failed), key.epoch,
                        key.iteration, ", ".join(sorted({t for t, _ in first.readers})),
                        first.reason)
        for key, failed in plan.failed.items():
            self.board.fail(key, failed.reason)
            for task, _ in failed.readers:
                self.failures.record(task, key.epoch, key.iteration, failed.reason)

    def _drop_window(self, window: int) -> None:
        self.book.rest_pending.discard(window)
        self._parts.pop(window, None)
        for name in self._joiner_parts.pop(window, {}):
            self._own_views.pop((name, window), None)
        plan = self.book.drop_window(window)
        self.carry.forget({window})
        self.board.drop_window(window, plan.views)
        self._trim()

    def _trim(self) -> None:
        """Free memory back to the kernel once a window is whole, pruned or dropped."""
        if self.nursery is not None:
            self._trims.ask(self.nursery)
