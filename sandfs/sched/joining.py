"""Tasks joining and leaving a running scheduler: a new task's part of the active windows (its
first window first, the others once its first batches are made), and what a task leaving or
idle releases. `WindowPlanner` holds the state; these are its methods, in a module of their
own."""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

import numpy as np
import trio

from sandfs.plan.task import TaskPlan
from sandfs.plan.window import (
    PlanningStopped,
    ViewKey,
    WindowPlan,
    batches_holding,
    lead_batches,
    stop_if_asked,
)
from sandfs.runtime import thaw_collector
from sandfs.sched import work
from sandfs.sched.parts import REST, WindowParts, timed_by
from sandfs.sched.policy import makes_ahead_unread
from sandfs.sched.windows import ViewOf

log = logging.getLogger(__name__)
# how long a joining task's other windows (and a window after one slow to plan) wait for its
# first batches
FIRST_BATCHES_WAIT_S = 5.0
# the batches whose videos' views a joining task resolves before its turn to plan (those of
# its lead part: `planning.LEAD_BATCHES`; its next parts look up any more)
AHEAD_BATCHES = 4


class TaskJoins:

    async def add_plan(self, plan: TaskPlan, added: Callable[[], None] | None = None) -> None:
        """Plan a new task into the active windows (and the windows to come), the window it
        starts in first: the videos of its first batches (`_lead_videos`) when its part of it
        is large. When that took long (`_first_batches_first`) it returns then: the other
        windows get their part once the task's first batch is made, and a reader that gets
        there sooner waits for it (`window_planned`). In a window planned in parts the task's
        part is planned in parts too, as its readers come (`_join_parts`): a task joining a
        mount of 250,000 videos waited 3.7 s for the rest of the window planned at once. A
        task with the window's own batches (one seed) joins their parts instead. `added` is
        called as the book takes the task (the registry serves it from then on). No part is
        swept meanwhile (`_sweeps`): it would hold the lock the task waits for."""
        self._joining += 1
        try:
            await self._join(plan, added)
        finally:
            self._joining -= 1

    async def _join(self, plan: TaskPlan, added: Callable[[], None] | None) -> None:
        ahead = await self._resolve_lead(plan)
        async with self.tasks_steady:
            self.carry.forget(self.book.future)
            self.book.add_task(plan)
            if added is not None:
                added()
            shared = {w for w in self.book.windows if self._join_shared_parts(plan, w)}
            self._lead_parts(plan, shared)
        self._note_window_added()  # a reader waiting on the task set looks again
        start = self.book.window_of_task(plan.name, 0)
        windows = sorted(set(self.book.windows) - shared, key=lambda w: (w != start, w))
        if not windows or plan.name in self.book.unread:  # planned once a reader comes
            return
        lead = self._lead_videos(windows[0], [plan])
        if lead is not None and lead == ahead:  # where they are known: no walk of the listing
            lead = ahead
        try:
            first = await self._add_part(plan, windows[0], lead=lead)
        except BaseException:  # its views there are made on demand
            self._drop_parts(plan.name, windows)
            raise
        if lead is None:  # planned whole: no parts of its own there
            self._drop_parts(plan.name, windows[:1], whole=True)
        later_parts: list[tuple[int, frozenset[str]]] = []
        in_parts: list[tuple[int, frozenset[str]]] = []
        for window in windows:
            if (window == windows[0] and lead is None) or not self._still_joining(plan, window):
                continue  # planned whole, or dropped meanwhile
            done = lead if window == windows[0] else frozenset()
            if window in self.book.rest_pending:
                in_parts.append((window, done))
            else:
                later_parts.append((window, done))  # the rest of its part of that window
        if first and in_parts:
            self._joining += 1  # until its first batches are made (`_due_part`)
            self.nursery.start_soon(self._join_parts_after, plan, in_parts, first)
        else:
            for window, done in in_parts:
                self._join_parts(plan, window, done)
        if first and later_parts:
            self.book.parts_pending[plan.name] = {window for window, _ in later_parts}
            self.nursery.start_soon(self._add_later_parts, plan, later_parts, first)
        else:
            for window, skip in later_parts:
                await self._add_part(plan, window, skip=skip)

    async def _resolve_lead(self, plan: TaskPlan) -> Lead | None:
        """Resolve the views of the task's lead part in a planning thread before its turn to
        plan (`resolve_ahead`): 250,000 videos, that part took 0.7 s once the task had waited
        0.4-0.7 s for the lock another task's part held; what it resolved then is looked up.
        Not a registration thread: registrations stuck in a user's labels FIFO hold those.
        Another user's task makes nothing before it is read."""
        window = plan.window_of(0)
        if not makes_ahead_unread(plan.cfg.access.registrar) or not plan.window_epochs(window):
            return None
        lead = Lead.of(plan, range(min(AHEAD_BATCHES, plan.iterations_per_epoch)))
        await self._plan_in_thread(resolve_ahead, plan, window, lead)
        return lead

    def _join_shared_parts(self, plan: TaskPlan, window: int) -> bool:
        """A task whose batches in a window planned in parts are those of the window's own
        tasks (a search's trials with one seed) joins their parts, and reads the batches
        planned so far. Planned in parts of its own, each shared batch's clips were planned
        twice (its videos decoded twice), and the batches its leaving released were read by
        the others too. Called with `tasks_steady` held: no part is being planned."""
        if (window not in self.book.rest_pending or plan.name in self.book.unread
                or not plan.window_epochs(window)):
            return False
        key = plan.plan_key(window)
        for parts in self._groups(window):
            if any(p.plan_key(window) == key for name, p in self.book.plans.items()
                   if name in parts.tasks):
                parts.tasks |= {plan.name}
                self._widen(plan, window, parts)
                self.board.add_reader(self.book.add_reader(window, plan), plan.name)
                self.wake()
                return True
        return False

    def _widen(self, plan: TaskPlan, window: int, parts: WindowParts) -> None:
        """A task reading more of the window's epochs than the task whose parts it joined
        (`plan_key` leaves epochs out) plans their next parts (its batches hold the other's):
        planned for the other, its later epochs' batches were all made on demand. The
        window's own parts are planned for all their tasks already."""
        groups = self._joiner_parts.get(window, {})
        owner = next((name for name, group in groups.items() if group is parts), None)
        if owner is None or parts.leading:  # a lead part being planned keeps its owner
            return
        if len(plan.window_epochs(window)) > len(self.book.plans[owner].window_epochs(window)):
            groups[plan.name] = groups.pop(owner)
            self._own_views[plan.name, window] = self._own_views.pop((owner, window), set())
            parts.behind = frozenset(parts.planned)  # their later epochs' clips, first

    def _lead_parts(self, plan: TaskPlan, shared: set[int]) -> None:
        """The task's parts of the windows planned in parts that it does not share, kept
        (none due: `leading`) while its lead part is planned: a trial with its seed joining
        meanwhile joins them (`_join_shared_parts`), not parts of its own planning the same
        batches. Called with `tasks_steady` held."""
        if plan.name in self.book.unread:
            return
        for window in self.book.rest_pending - shared:
            self._joiner_parts.setdefault(window, {})[plan.name] = WindowParts(
                window, (), [plan.name], leading=True)

    def _join_parts(self, plan: TaskPlan, window: int, planned: frozenset[str]) -> None:
        """The task's part of a window planned in parts is planned in parts of its own, as
        the window's are (`WindowPlanner._due_part`), from `planned` on."""
        parts = self._joiner_parts.setdefault(window, {}).get(plan.name)
        if parts is None:
            parts = self._joiner_parts[window][plan.name] = WindowParts(
                window, (), [plan.name])
        parts.add(planned)
        parts.leading = False
        for name in sorted(self._sharing(plan.name, window)):  # joined during its lead part
            self._widen(self.book.plans[name], window, parts)
        self._note_window_added()  # its readers waiting for a batch of its lead look again
        self.wake()

    def _drop_parts(self, name: str, windows: Iterable[int], *, whole: bool = False) -> None:
        """The task's parts of these windows failed, or (`whole`) were planned whole: they go
        on with a trial that joined them meanwhile (`_hand_over`), or go."""
        for window in windows:
            self._hand_over(name, window, whole=whole)

    def _groups(self, window: int) -> list[WindowParts]:
        """The window's own parts and those of the tasks that joined meanwhile."""
        own = self._parts.get(window)
        return [*([own] if own is not None else []), *self._joiner_parts.get(window, {}).values()]

    def _sharing(self, name: str, window: int) -> set[str]:
        """The tasks that joined the parts of a task that joined the window in parts."""
        parts = self._joiner_parts.get(window, {}).get(name)
        return set() if parts is None else self._sharing_group(parts, name)

    def _sharing_group(self, parts: WindowParts, name: str) -> set[str]:
        return parts.tasks & self.book.plans.keys() - {name}

    def _drop_joiner(self, name: str) -> None:
        """A task left: its parts of windows planned in parts go on with a task that joined
        them, or go, and those windows may be whole now. Its name leaves every part it shared
        (a window's own too): a task registered again under it, of another seed maybe, got
        their readers and could inherit them, its own parts overwritten."""
        for window in list(self._joiner_parts):
            self._hand_over(name, window)
        for window in {*self._parts, *self._joiner_parts}:
            for parts in self._groups(window):
                parts.tasks -= {name}
        for key in [k for k in self._own_views if k[0] == name]:
            del self._own_views[key]

    def _hand_over(self, name: str, window: int, *, whole: bool = False) -> None:
        """The task's parts of the window go on with the trial sharing them that reads the
        most of the window's epochs, or go, and the window may be whole now. From a task
        still registered, a trial reading more epochs plans the planned videos' later clips
        first (as `_widen`); `whole`: its part was planned whole, and only such a trial
        needs them. A trial joining during a lead part that failed or was planned whole had
        its batches made on demand (its videos decoded twice)."""
        parts = self._joiner_parts.get(window, {}).pop(name, None)
        own = self._own_views.pop((name, window), set())
        if parts is None:
            return
        reads = {n: len(self.book.plans[n].window_epochs(window))
                 for n in self._sharing_group(parts, name)}
        left = self.book.plans.get(name)  # None: it left, its part given as it is
        epochs = 0 if left is None else len(left.window_epochs(window))
        heirs = sorted(reads, key=lambda n: (-reads[n], n))
        if whole:  # nor is it an heir later: its batches there are planned
            parts.tasks -= {name}
            heirs = [n for n in heirs if reads[n] > epochs]
        if not heirs:
            self._whole_yet(window)
            return
        parts.leading = False  # its lead part is over: the heir's are due
        if left is not None and reads[heirs[0]] > epochs:
            parts.behind = frozenset(parts.planned)
        self._joiner_parts[window][heirs[0]] = parts
        self._own_views[heirs[0], window] = own
        self.wake()

    async def _plan_joiner_part(self, name: str, window: int, part: frozenset[str]) -> None:
        """A joining task's next part of a window planned in parts (`_add_part`). A failure
        leaves its other views of the window to be made on demand (the same bytes)."""
        parts, plan = self._joiner_parts[window][name], self.book.plans[name]
        behind, parts.behind = parts.behind, frozenset()
        try:
            if behind:  # planned for a task reading fewer epochs: the others' clips first
                await self._add_part(plan, window, lead=behind, fresh=True)
            if part is REST:
                await self._add_part(plan, window, skip=parts.planned)
            elif part is not behind:
                await self._add_part(plan, window, lead=part)
        except Exception:
            if self.book.plans.get(name) is not plan:
                return  # removed while it was planned: no loss
            log.exception("task %s: planning its part of window %d failed; its views there "
                          "are made on demand", name, window)
            part = REST
        if part is REST:
            self._joiner_parts.get(window, {}).pop(name, None)
            self._own_views.pop((name, window), None)
        else:
            parts.add(part)
        self._note_window_added()  # its readers waiting for the part look again

    async def _add_part(self, plan: TaskPlan, window: int, *,
                        lead: frozenset[str] | None = None,
                        skip: Container[str] = frozenset(), fresh: bool = False
                        ) -> set[ViewKey]:
        """The task's part of an active window (or its lead part, a next part, or the rest of
        it: `lead`, `skip` as `plan_window`'s); the batches to make before planning more. The
        views the window holds already (a search's trials share theirs; with `fresh`, those
        it added too: `lead` planned in them already) get readers only;
        should one of them be released meanwhile, the part is planned again in full."""
        if not self._still_joining(plan, window):  # dropped while earlier parts were planned
            return set()
        started = trio.current_time()
        own = self._own_views.setdefault((plan.name, window), set())
        base = self.book.windows[window]
        known = _Known(base.views, () if fresh else own)
        part, on_disk = await self._plan_part(plan, window, known, lead, skip)
        if part is None:
            return set()
        if any(k not in base.views for k in part.views if k not in part.view_plans):
            part, on_disk = await self._plan_part(plan, window, frozenset(), lead, skip)
            if part is None:
                return set()
        timed_by(self._timing, self._merge_part)(plan, part, on_disk, own, whole=lead is None)
        if lead is not None:
            return self._waited_batches(part)
        return self._first_batches_first(part, trio.current_time() - started)

    def _merge_part(self, plan: TaskPlan, part: WindowPlan, on_disk: frozenset,
                    own: set[ViewKey], *, whole: bool) -> None:
        """A task's part (`whole`: its last) merged into its window, on the board."""
        window = part.window
        merged = self.book.merge(window, part, own)
        own.update(merged.new_views)
        for name in self._sharing(plan.name, window):  # tasks that joined its parts
            self.book.add_reader(window, self.book.plans[name], merged.new_views)
        if whole:  # its part of the window is whole
            self._own_views.pop((plan.name, window), None)
        self.board.add_part(window, merged, on_disk)
        self._anticipate(part)
        self._fail_views(part)
        self._settle()

    async def _plan_part(self, plan: TaskPlan, window: int, known: Container[ViewKey],
                         lead: frozenset[str] | None, skip: Container[str]
                         ) -> tuple[WindowPlan | None, frozenset]:
        """`work.plan_task_part` in a thread; (None, ...) when the task left or the window was
        dropped meanwhile, whatever planning it raised (it planned for a task gone)."""
        resolved = self.book.windows[window].view_plans  # its own earlier parts' batches
        try:
            part, on_disk = await self._plan_in_thread(work.plan_task_part, plan, window,
                                                       self.store, known, lead, skip, resolved)
        except Exception:
            if self._still_joining(plan, window):
                raise
            return None, frozenset()
        if not self._still_joining(plan, window):
            return None, frozenset()
        return part, on_disk

    def _still_joining(self, plan: TaskPlan, window: int) -> bool:
        """Neither the task removed nor the window dropped while the part was planned."""
        return self.book.plans.get(plan.name) is plan and window in self.book.windows

    async def _first_made(self, first: set[ViewKey]) -> None:
        """Until a joining task's `first` batches are made, FIRST_BATCHES_WAIT_S at most."""
        with trio.move_on_after(FIRST_BATCHES_WAIT_S):
            for key in first:
                if key in self.board.views:
                    await self.board.flights.event(key).wait()

    async def _join_parts_after(self, plan: TaskPlan,
                                windows: list[tuple[int, frozenset[str]]],
                                first: set[ViewKey]) -> None:
        """`_join_parts` of the windows planned in parts, once the task's first batches are
        made (its lead part holds them): 250,000 videos, its next parts planned meanwhile on
        the cores those batches were decoded on held its first batch 2.8-3.9 s, not 1.2-1.7.
        Its part stays `leading` meanwhile; a trial of its seed joining then shares it."""
        try:
            await self._first_made(first)
        finally:
            self._joining -= 1
        for window, done in windows:
            if self._still_joining(plan, window) and window in self.book.rest_pending:
                self._join_parts(plan, window, done)
        self.wake()

    async def _add_later_parts(self, plan: TaskPlan, windows: list[tuple[int, frozenset[str]]],
                               first: set[ViewKey]) -> None:
        """`add_plan`'s other windows, after the task's first batches (at most
        FIRST_BATCHES_WAIT_S). A failure leaves their views to be made on demand."""
        await self._first_made(first)
        try:
            for window, skip in windows:
                if self.book.plans.get(plan.name) is not plan:
                    return  # removed meanwhile
                if window in self.book.windows:
                    await self._add_part(plan, window, skip=skip)
                self.book.parts_pending[plan.name].discard(window)
                self._note_window_added()
        except Exception:
            if self.book.plans.get(plan.name) is plan:  # else removed while planned: no loss
                log.exception("task %s: planning windows %s failed; their views are made on "
                              "demand", plan.name, [window for window, _ in windows])
        finally:
            if self.book.plans.get(plan.name) is plan:
                self.book.parts_pending.pop(plan.name, None)
            self._note_window_added()
            self.wake()

    async def remove_plan(self, name: str) -> None:
        """Forget a task: views no other task reads are released, in memory and on disk."""
        async with self.tasks_steady:
            released = self._forget(name)
        self._note_window_added()  # its readers waiting for a part of a window look again
        if self.store is not None:
            await trio.to_thread.run_sync(work.release_clips, self.store, released)

    async def rest_plan(self, name: str, since: float) -> None:
        """A task idle since `since` makes nothing ahead (`WindowBook.rest_task`): its batches
        no other task reads leave memory (their clips stay on disk, for its next read), and so
        do the windows it wanted that no other task wants (planned for it, they held other
        tasks' batches too)."""
        async with self.tasks_steady:
            if name not in self.book.idle(since):  # read again, or removed, meanwhile
                return
            self.carry.forget(self.book.future)
            its_windows = self.book.wanted_by(name)
            released = self.book.rest_task(name)
            self.anticipated.pop(name, None)
            self._drop_released(name, released)
            for window in its_windows & set(self.book.windows) - self.book.wanted():
                self._drop_window(window)
        self._note_window_added()
        log.info("task %s: idle, its views are made on demand until read again (%d released)",
                 name, len(released))

    def _drop_released(self, name: str, released: dict[ViewKey, ViewOf]) -> None:
        """The batches a task leaving (or idle) released, and its part in the others."""
        self.board.forget_pending(set(released))
        for key in released:
            self.board.drop(key, ready_too=True)
        self.board.forget_reader(name)

    def _forget(self, name: str) -> dict[ViewKey, ViewOf]:
        self.carry.forget(self.book.future)
        released = self.book.remove_task(name)
        self.failures.forget(name)
        self.anticipated.pop(name, None)  # its batch is dropped below, or another task's too
        self._drop_joiner(name)
        self._readers_came.discard(name)  # the name may be registered again
        self._drop_released(name, released)
        if self.freezes_windows:  # the task's plan refers to itself: the collector frees it
            thaw_collector()
        return released


class Lead(frozenset[str]):
    """The videos of a joining task's first batches, as `plan_window`'s lead, with their
    places in its listing: the batches holding them come from those (`lead_batches`), not
    from a walk of the listing (250,000 videos: 30 ms of CPU, resolved ahead and planned)."""

    __slots__ = ("places",)
    places: np.ndarray

    @classmethod
    def of(cls, plan: TaskPlan, iterations: Iterable[int]) -> Lead:
        places = [i for iteration in iterations for i in plan.batch_slots(0, iteration)]
        lead = cls(plan.listed[i].path for i in places)
        lead.places = np.unique(np.array(places, np.int64))
        return lead

    def batches_of(self, plan: TaskPlan, epoch: int) -> list[int]:
        return batches_holding(plan, epoch, self.places)


def resolve_ahead(plan: TaskPlan, window: int, lead: frozenset[str]) -> None:
    """Resolve the views of the task's window holding a `lead` video (the batches its lead
    part holds), memoized in the plan. Only in a window frozen already: a task refused later
    shaped no window. A view that fails here fails again, with its reason, in its part."""
    if not plan.coordination.is_frozen(plan.name, window):
        return
    held = lead_batches(plan, lead)
    try:
        for epoch in plan.window_epochs(window):
            iterations = held(epoch)
            plan.draws.prepare_batches(epoch, iterations)  # drawn at once, not a video a time
            for iteration in iterations:
                stop_if_asked()  # shutdown: the daemon does not wait for it
                plan.resolve_ahead(epoch, iteration)
    except PlanningStopped:
        raise
    except Exception:  # planned again in its part, and failed there with its reason
        log.debug("task %s: its lead part not resolved ahead", plan.name, exc_info=True)


@dataclass(frozen=True, slots=True)
class _Known:
    """The window's batches a joining task did not add itself (`own`): read, not planned,
    by its next part. Looked up as the part is planned: no copy of the window's batches."""

    views: Container[ViewKey]
    own: Container[ViewKey]

    def __contains__(self, key: object) -> bool:
        return key in self.views and key not in self.own
