"""The concrete plan of one k-epoch window across tasks, grouped by video (SAND §5.2, §5.4).

For every video it lists each *use* — a clip in a slot of a view — of every task in the window,
and the union of the frames they need: the materializer decodes that union in one pass. Views
of tasks with the same data key are the same objects and appear once.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, MutableMapping, Sequence, Sized
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from sandfs.config.condition import ConditionError
from sandfs.faults import fault_point
from sandfs.plan.batchrows import BatchRows, ReadersMap, ViewPlansMap, ViewsMap
from sandfs.plan.probed import NoUsableVideo
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.usegroups import UseGroups
from sandfs.plan.uses import ClipUse as ClipUse  # re-exported: its users import it here
from sandfs.plan.uses import kept
from sandfs.plan.windowvideos import ColumnVideo, WindowVideos
from sandfs.plan.windowvideos import VideoWork as VideoWork  # re-exported, as ClipUse
from sandfs.runtime import collector_paused

# views planned between two looks at `STOP_PLANNING` (~30 ms of planning), resolved
# together: a task epoch's up to this many a clip table (numpy's calls made once for them)
VIEWS_PER_STOP_CHECK = 1024


class PlanningStopped(Exception):
    """Planning was told to stop (`STOP_PLANNING`): its caller is cancelled."""


# Whether a planning thread should stop: set by its caller (trio copies it into the thread),
# so that shutdown need not wait for a window of 250,000 videos to be planned (tens of seconds)
STOP_PLANNING: ContextVar[Callable[[], bool]] = ContextVar("STOP_PLANNING",
                                                           default=lambda: False)


def stop_if_asked() -> None:
    """Raise PlanningStopped when this thread's caller asks planning to stop."""
    if STOP_PLANNING.get()():
        raise PlanningStopped


class ViewKey(NamedTuple):
    """One batch object: tasks with the same plan key (data, seed and what they share) have the
    same views and share it. A tuple (hashed and compared in C, equal to one with the same
    fields), as a window's batch rows make one whenever a key is read."""

    plan_key: object
    epoch: int
    iteration: int

    @property
    def parts(self) -> tuple:
        """The canonical description that on-disk object keys are digests of."""
        return ("view", self.plan_key, self.epoch, self.iteration)


def view_key(plan: TaskPlan, epoch: int, iteration: int) -> ViewKey:
    return ViewKey(plan.plan_key(plan.window_of(epoch)), epoch, iteration)


@dataclass(frozen=True, slots=True)
class FailedView:
    reason: str
    readers: tuple[tuple[str, int], ...]  # (task, position) pairs


@dataclass(slots=True)
class WindowPlan:
    window: int
    # by video path: the window's columns (`WindowVideos`), or a dict
    videos: MutableMapping[str, VideoWork | ColumnVideo]
    # mappings over the window's batch rows (`plan.batchrows`), or dicts: a key a batch
    views: MutableMapping[ViewKey, tuple[TaskPlan, int, int]]  # (plan, epoch, iteration)
    readers: MutableMapping[ViewKey, tuple[tuple[str, int], ...]]  # (task, position) pairs
    # views that could not be planned (a condition failed): why, and their readers; they are
    # in neither `views` nor `readers`, and fail (EIO) instead of being made
    failed: dict[ViewKey, FailedView] = field(default_factory=dict)
    # the views planned here (not `known` ones), resolved: the board holds them, rather than
    # resolving them again (a task's plan keeps its last 4,096; 10,000 videos make 6,250 a
    # window, and resolving those again took the event loop 2 s); made from their rows
    view_plans: MutableMapping[ViewKey, ViewPlan] = field(default_factory=dict)

    def snapshot(self) -> WindowPlan:
        """A copy for a thread to read while tasks join and leave (they change this one),
        taken in a thread too: each container is copied in one call (atomic under the GIL;
        a mapping over rows copies only its overlay, the rows it shares never change), and
        uses of views the copy does not hold (a task joining or leaving meanwhile) are left
        out. Its views are those with readers in its copy: a task leaving between the two
        copies left views without readers, which pruning reads (KeyError). A task leaving
        after it deletes its batches from this plan only: the copy, its uses included, still
        reads their readers and clips as planned, so pruning decides the same."""
        readers = self.readers.copy()  # type: ignore[attr-defined]
        views = self.views.copy()  # type: ignore[attr-defined]
        for key in [key for key in views if key not in readers]:
            del views[key]
        videos = _kept_videos(self.videos, views.__contains__)
        return WindowPlan(self.window, videos, views, readers, dict(self.failed),
                          self.view_plans.copy())  # type: ignore[attr-defined]

    def take_rest(self, rest: WindowPlan) -> list[ViewKey]:
        """The batches of a window's rest (planned after this part): those here already get
        its readers too, the others join as they are (rows added to this window's table where
        both are rows, else a key at a time); the keys that joined."""
        new = []
        for key in rest.views:
            if key in self.views:  # an earlier part's batch: its readers stay, the rest's join
                more = tuple(r for r in rest.readers[key] if r not in self.readers[key])
                if more:
                    self.readers[key] = self.readers[key] + more
            else:
                new.append(key)
        loose = new
        table = getattr(self.views, "table", None)
        theirs = getattr(rest.views, "table", None)
        if table is not None and theirs is not None and all(
                m.is_over(table) for m in (self.views, self.readers, self.view_plans)):
            loose = [key for key in new if table.row_of(key) >= 0]  # deleted here once
            table.take(theirs, [key for key in new if table.row_of(key) < 0], rest.readers)
        for key in loose:
            self.views[key], self.readers[key] = rest.views[key], rest.readers[key]
            if key in rest.view_plans:
                self.view_plans[key] = rest.view_plans[key]
        return new


def _kept_videos(videos: MutableMapping[str, VideoWork | ColumnVideo],
                 wanted: Callable[[ViewKey], bool]) -> MutableMapping[str, VideoWork | ColumnVideo]:
    """The videos with the uses of batches `wanted` only, those left some."""
    if isinstance(videos, WindowVideos):
        return videos.kept_only(wanted)
    works = {p: VideoWork(w.info, w.plan, w.window, kept(w.uses, wanted))
             for p, w in list(videos.items())}
    return {p: w for p, w in works.items() if w.uses}


def plan_window(plans: Sequence[TaskPlan], window: int,
                known: Container[ViewKey] = frozenset(), *,
                lead: Container[str] | None = None,
                skip: Container[str] = frozenset(),
                resolved: Mapping[ViewKey, ViewPlan] = MappingProxyType({})) -> WindowPlan:
    """The window's views, readers and each video's clips. Views `known` (in the window a task
    joins, planned already) get their readers only: their clips are planned already. A
    window's *lead* part (`lead`: video paths) holds only the batches with a lead video and
    only the lead videos' clips, all of them in the window (each video is still decoded once
    a window); its rest (`skip`: the lead videos) holds every batch and the other videos'.
    `resolved`: views a part of the window resolved already, used as they are (a batch is
    resolved once a window, however many parts hold its videos)."""
    with collector_paused():  # its objects live as long as the window: nothing to collect
        return _plan_window(plans, window, known, lead, skip, resolved)


def _plan_window(plans: Sequence[TaskPlan], window: int,
                 known: Container[ViewKey] = frozenset(), lead: Container[str] | None = None,
                 skip: Container[str] = frozenset(),
                 resolved: Mapping[ViewKey, ViewPlan] = MappingProxyType({})) -> WindowPlan:
    rows, added = _batch_rows(plans, window, lead)
    groups = UseGroups(rows.columns)  # each batch's uses, grouped by video at the end
    views, frozen = ViewsMap(rows), ReadersMap(rows)
    to_draw = _to_draw(added, known, resolved)
    drawing: list[tuple[TaskPlan, int]] = []  # the task epoch whose draws are held
    failed: dict[ViewKey, FailedView] = {}
    # (key, its row, plan, view; None: in `done`)
    planned: list[tuple[ViewKey, int, TaskPlan, ViewPlan | None]] = []
    view_plans = ViewPlansMap(rows)
    # views of the task epoch drawn (`drawing`: another is drawn once they are tabled),
    # resolved together, and their iterations
    pending: list[ViewKey] = []
    pending_iterations: list[int] = []
    done: dict[ViewKey, ViewPlan | Exception] = {}  # pending views resolved, or why not

    def tabled() -> None:
        """The views resolved since the last call (their clips a table's rows), and their uses
        grouped by video: a table up to 1,024 batches, so that their clips as resolved
        are not all held at once (a window's peak would be the memory its columns save)."""
        resolve()
        whole: list[int] = []  # rows whose uses are all noted, at once (one plan's)
        for key, number, plan, view in planned:
            if view is None:
                view = done.pop(key)
                if isinstance(view, Exception):  # this view fails; the rest goes on
                    failed[key] = FailedView(_reason(view), frozen.pop(key))
                    continue
            rows.resolved(number, view)
            if lead is not None or skip:
                groups.note(plan, number, slot_owners(plan, view), lead, skip)
            else:
                whole.append(number)
        if whole:  # the views of one task epoch: tabled when it changes
            groups.note_rows(planned[0][2], whole)
        planned.clear()

    def resolve() -> None:
        """The pending views, resolved at once (a task epoch's as columns, `resolve_batches`);
        a view that fails fails alone, with its reason."""
        if not pending:
            return
        (plan, epoch), iterations = drawing[0], list(pending_iterations)
        try:
            found = plan.resolve_batches(epoch, iterations)
        except Exception:  # a bug resolving them together: each alone, to fail alone
            found = [_alone(plan, epoch, iteration) for iteration in iterations]
        done.update(zip(pending, found, strict=True))
        pending.clear()
        pending_iterations.clear()

    for count, (key, number) in enumerate(views.keyed_rows()):  # new: every key a row's
        plan, epoch, iteration = rows.place(number)
        if count % VIEWS_PER_STOP_CHECK == 0:
            stop_if_asked()
            tabled()
        if key in known:
            continue
        if not drawing or drawing[0] != (plan, epoch):
            tabled()  # the views of the epoch drawn before are resolved: its draws go
            _draw_next(drawing, plan, epoch, to_draw.pop((plan, epoch), None))
        try:
            fault_point("planning", plan.name)
        except Exception as exc:  # this view fails; the rest goes on
            failed[key] = FailedView(_reason(exc), frozen.pop(key))
            continue
        # not `view_plan`: its cache would keep a second copy of the clips the table has;
        # one resolved already is held as it is, not made again
        view = resolved.get(key) or plan.take_ahead(epoch, iteration)
        if view is None:
            pending.append(key)
            pending_iterations.append(iteration)
        planned.append((key, number, plan, view))
    tabled()
    for plan in plans:  # what was resolved ahead and not taken (planned already) goes
        plan.drop_ahead(plan.window_epochs(window))
    for plan, epoch in drawing:  # the views hold what was drawn: the arrays go, before the
        plan.draws.release(epoch)  # uses are grouped (a window's peak would hold both)
    videos = groups.grouped(window)
    for key in failed:
        del views[key]
    return WindowPlan(window, videos, views, frozen, failed, view_plans)


def _alone(plan: TaskPlan, epoch: int, iteration: int) -> ViewPlan | Exception:
    """One batch resolved alone, or why it cannot be."""
    try:
        return plan.resolve_batches(epoch, [iteration])[0]
    except Exception as exc:  # the batch's reason
        return exc


def _reason(exc: Exception) -> str:
    """Why a view failed: a condition or no usable video say so; a bug or MemoryError
    planning it is named."""
    if isinstance(exc, ConditionError | NoUsableVideo):
        return str(exc)
    return f"planning failed: {type(exc).__name__}: {exc}"


def _batch_rows(plans: Sequence[TaskPlan], window: int, lead: Container[str] | None
                ) -> tuple[BatchRows, dict[tuple[TaskPlan, int], np.ndarray]]:
    """The window's batches, a row each, with their readers: those with a lead video only
    when `lead` is given. A task epoch's rows added at once; and the iterations each task
    epoch added (it resolves them: another task of its plan key only reads them)."""
    rows, added = BatchRows(), {}
    for plan in plans:
        held = None if lead is None else lead_batches(plan, lead)
        per = plan.iterations_per_epoch
        for epoch in plan.window_epochs(window):
            iterations = (np.arange(per) if held is None else
                          np.asarray(held(epoch), np.int64).reshape(-1))
            if not len(iterations):
                continue
            numbers, new = rows.add_batches(view_key(plan, epoch, 0), plan, iterations)
            rows.columns.add_readers(numbers, plan.name)  # at epoch * per + iteration
            if len(new):
                added[plan, epoch] = new
    return rows, added


def slot_owners(plan: TaskPlan, view: ViewPlan) -> list[str]:
    """The listed video whose slot each clip of the batch fills: a bad one's slots hold its
    stand-in's clips (docs/contract.md#lazy-scan), and a window's parts split its clips by
    the listed videos they hold, so that a part holding the bad one plans them."""
    listed = [plan.listed[i].path for i in plan.batch_slots(view.epoch, view.iteration)]
    per_stream = len(view.clips) // len(plan.paths)
    samples = per_stream // len(listed)
    return [listed[slot % per_stream // samples] for slot in range(len(view.clips))]


def lead_batches(plan: TaskPlan, lead: Container[str]) -> Callable[[int], list[int]]:
    """The iterations of an epoch whose batches hold a lead video: as the lead says
    (`batches_of`: a window's part knows its videos' places) or from a walk of the listing."""
    known = getattr(lead, "batches_of", None)
    if known is not None:
        return partial(known, plan)
    return partial(batches_holding, plan, videos=lead_indices(plan, lead))


def lead_indices(plan: TaskPlan, lead: Container[str]) -> np.ndarray:
    """The listed videos of `plan` whose paths are in `lead`."""
    return np.fromiter((i for i, v in enumerate(plan.listed) if v.path in lead), np.int64)


def batches_holding(plan: TaskPlan, epoch: int, videos: np.ndarray) -> list[int]:
    """The iterations of `epoch` whose batches hold any of these listed videos, ascending:
    their places in the epoch's order: the batches without them are not looked at."""
    places = np.flatnonzero(np.isin(plan.epoch_order(epoch), videos))
    iterations = np.unique(places // plan.sampling.videos_per_batch)
    return iterations[iterations < plan.iterations_per_epoch].tolist()  # drop_last drops some


def _to_draw(added: dict[tuple[TaskPlan, int], np.ndarray],
             *held: Container[ViewKey]) -> dict[tuple[TaskPlan, int], np.ndarray]:
    """The iterations to draw of each task epoch's batches: those it added (`_batch_rows`)
    but the views `held` already (none looked up where every container is empty)."""
    held = tuple(h for h in held if not (isinstance(h, Sized) and not len(h)))
    if not held:
        return added
    return {(plan, epoch): iterations[[not any(view_key(plan, epoch, i) in h for h in held)
                                       for i in iterations.tolist()]]
            for (plan, epoch), iterations in added.items()}


def _draw_next(drawing: list[tuple[TaskPlan, int]], plan: TaskPlan, epoch: int,
               iterations: np.ndarray | None) -> None:
    """Draw the clips of a task epoch's views at once (`ClipDraws.prepare_batches`), then
    let the epoch drawn before go: one epoch's draws held at a time, not a window's (~38
    bytes a video an epoch with a random crop and flip: 47 MB at 250,000 videos and k = 5;
    what the window's epochs draw alike stays while the next is drawn)."""
    stop_if_asked()
    if iterations is not None:
        plan.draws.prepare_batches(epoch, iterations)
    for done, before in drawing:
        done.draws.release(before)
    drawing[:] = [(plan, epoch)]
