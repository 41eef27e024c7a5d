"""The window book: the tasks, where each stands, the k-epoch windows planned for them (active,
and further ahead only to carry frames), and who reads which batch when."""

from __future__ import annotations

from collections import ChainMap, Counter
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from sandfs.plan.batchrows import plan_keys_of
from sandfs.plan.task import TaskPlan, ViewPlan
from sandfs.plan.uses import batches, kept, row_views, selected
from sandfs.plan.window import ClipUse, VideoWork, ViewKey, WindowPlan, view_key
from sandfs.plan.windowvideos import join_videos
from sandfs.sched.policy import NOT_NEEDED, makes_ahead_unread, share_owner

ViewOf = tuple[TaskPlan, int, int]  # (plan, epoch, iteration) of a batch


@dataclass(frozen=True, slots=True)
class Position:
    """Where a task stands: the view its trainer opened last (a re-read behind it aside)."""

    epoch: int
    iteration: int


@dataclass(frozen=True, slots=True)
class Merged:
    """What a joining task adds to an active window."""

    new_views: dict[ViewKey, ViewOf]  # batches no task planned before, in plan order
    more_readers: dict[ViewKey, frozenset[str]]  # tasks that read batches planned already
    uses: dict[str, Sequence[ClipUse]]  # the new views' clips, by video (`Uses`)
    view_plans: dict[ViewKey, ViewPlan]  # the new views, resolved


class WindowBook:
    def __init__(self, plans: list[TaskPlan]) -> None:
        self.plans = {p.name: p for p in plans}
        self.positions = {name: 0 for name in self.plans}  # global iteration index per task
        # views open right now, per task (position -> count): readers behind the latest open
        # (a second trainer, a prefetching loader, a re-read) keep their windows planned
        self.open_positions: dict[str, Counter[int]] = {name: Counter() for name in self.plans}
        # tasks planned into no window until read (again): another user's, unread since it was
        # registered or for `idle_after_s` (Scheduler)
        self.unread: set[str] = set()
        self.read_at: dict[str, float] = {}  # when a view of the task was last opened
        # the furthest window a view of the task was read in (or first opened in)
        self.read_window: dict[str, int] = {}
        self.turns: dict[int, int] = {}  # owner -> when a window was last planned for it
        self.owners = {p.name: owner_key(p) for p in plans}  # whose share each task's jobs use
        self._windows: dict[int, WindowPlan] = {}  # active: `add_window`, `drop_window`
        # the active windows a plan key's batches are planned in (one but for a key that
        # names no window: test views): a reader's deadline, a job's owners and a batch's
        # plan are asked for at every dispatch, a lookup or two, not a walk of windows; by
        # plan key, not a key a batch (one made as its row is read: ~100 bytes a batch)
        self._window_of: dict[object, tuple[int, ...]] = {}
        self.windows: Mapping[int, WindowPlan] = MappingProxyType(self._windows)
        self.future: dict[int, WindowPlan] = {}  # windows further ahead: only to carry frames
        # active windows a joining task has no part in yet, by task (Scheduler.add_plan)
        self.parts_pending: dict[str, set[int]] = {}
        # active windows planned in part: their first batches' videos (WindowPlanner.activate)
        self.rest_pending: set[int] = set()
        self.generation = 0  # counts tasks joining and leaving

    # -- positions --------------------------------------------------------------------------

    def index(self, task: str, epoch: int, iteration: int) -> int:
        return epoch * self.plans[task].iterations_per_epoch + iteration

    def position(self, task: str) -> Position:
        return Position(*divmod(self.positions[task], self.plans[task].iterations_per_epoch))

    def opened(self, task: str, epoch: int, iteration: int, *, moves: bool,
               now: float = 0.0) -> None:
        """A view opened at `now`; `moves`: the task stands there now."""
        index = self.index(task, epoch, iteration)
        if moves:
            self.positions[task] = index
        self.open_positions[task][index] += 1
        self.unread.discard(task)
        self.read_at[task] = now
        self.read_window.setdefault(task, self.plans[task].window_of(epoch))

    def read(self, task: str, epoch: int) -> None:
        """A view of the task's `epoch` was read (a task that left while the read waited:
        nothing)."""
        if task not in self.plans:
            return
        window = self.plans[task].window_of(epoch)
        self.read_window[task] = max(self.read_window.get(task, window), window)

    def too_far(self, task: str, epoch: int, ahead: int) -> bool:
        """Is `epoch` of another user's task more than `ahead` windows past the furthest it
        read? Opening it would freeze windows no read of it reached (docs/deploy.md#limits)."""
        plan = self.plans[task]
        read = self.read_window.get(task)
        return (read is not None and plan.window_of(epoch) > read + ahead
                and not makes_ahead_unread(plan.cfg.access.registrar))

    def idle(self, since: float) -> list[str]:
        """The tasks that go back to making nothing ahead: another user's (`makes_ahead_unread`)
        whose views were all opened before `since`."""
        return [name for name, plan in self.plans.items()
                if name not in self.unread and self.read_at.get(name, since) < since
                and not makes_ahead_unread(plan.cfg.access.registrar)]

    def released(self, task: str, epoch: int, iteration: int) -> None:
        opened = self.open_positions.get(task)
        if opened is None:  # the task has ended
            return
        index = self.index(task, epoch, iteration)
        opened[index] -= 1
        if opened[index] <= 0:
            del opened[index]

    def ahead(self, task: str, count: int) -> Iterator[tuple[int, int]]:
        """(epoch, iteration) of the task's next `count` views, within its plan."""
        plan = self.plans[task]
        for step in range(1, count + 1):
            epoch, iteration = divmod(self.positions[task] + step, plan.iterations_per_epoch)
            if epoch >= plan.epochs:
                return
            yield epoch, iteration

    def deadline_of(self, key: ViewKey) -> int:
        """Iterations until a reader gets to this view: from the task's position, or from a
        view open behind it (a second reader of the task)."""
        ahead = [pos - at
                 for task, pos in self._readers(key)
                 if task not in self.unread
                 for at in (self.positions[task], *self.open_positions[task])
                 if pos >= at]
        return min(ahead, default=NOT_NEEDED)

    # -- windows ----------------------------------------------------------------------------

    def wanted(self) -> set[int]:
        """Each task's current and next window, and the windows of the views open now (none
        for a task no reader came to yet)."""
        return {w for name in self.plans if name not in self.unread
                for w in self.wanted_by(name)}

    def wanted_by(self, name: str) -> set[int]:
        plan, per_epoch = self.plans[name], self.plans[name].iterations_per_epoch
        current = plan.window_of(self.positions[name] // per_epoch)
        return ({w for w in (current, current + 1) if plan.window_epochs(w)}
                | {plan.window_of(p // per_epoch) for p in self.open_positions[name]})

    def held_back(self, window: int, tasks: Iterable[str]) -> set[int]:
        """A window in parts and the later windows its `tasks` want: those are planned once
        it is whole (a jump: its rest at once); the other tasks' windows meanwhile."""
        return {window} | {w for name in set(tasks) & self.plans.keys()
                           if name not in self.unread
                           for w in self.wanted_by(name) if w > window}

    def stands_in_any(self, windows: Container[int]) -> bool:
        """Does a read task stand in one of `windows` not planned yet (a reader that jumped
        past a window in parts to one it holds back: its rest is planned at once)? A task
        on other videos, standing in a window of its own, had the whole rest planned."""
        return any(current in windows and current not in self.windows
                   for name, plan in self.plans.items() if name not in self.unread
                   for current in [plan.window_of(self.positions[name]
                                                  // plan.iterations_per_epoch)])

    def next_to_plan(self, todo: set[int]) -> int:
        """Of the windows to plan, the soonest of the owner whose turn it is (the one served
        least recently): owners take turns, so one user's many tasks hold no other user's
        next window back. With one owner: the soonest window."""
        wanting: dict[int, set[int]] = {}
        for name in self.plans:
            if name not in self.unread:
                for w in self.wanted_by(name) & todo:
                    wanting.setdefault(w, set()).add(self.owners[name])
        window = min(todo, key=lambda w: (min((self.turns.get(o, -1) for o in
                                               wanting.get(w, ())), default=-1), w))
        turn = max(self.turns.values(), default=0) + 1
        self.turns.update(dict.fromkeys(wanting.get(window, ()), turn))
        return window

    def owners_of(self, keys: Iterable[ViewKey]) -> set[int]:
        """The owners (`share_owner`) of the tasks that read these batches."""
        return {self.owners[task] for key in keys for task, _ in self._readers(key)
                if task in self.owners}

    def planned_plans(self, window: int | None = None) -> list[TaskPlan]:
        """The tasks new windows (`window`) are planned for: not those no reader came to yet,
        whose views are made on demand until the window after their first read (the same bytes:
        the window's draws are frozen for every task on the dataset alike); nor those past
        `window` with no view open in it, which reach it only reading back (on demand too): a
        user's tasks far ahead made every window of root's task as slow to plan as theirs."""
        return [plan for name, plan in self.plans.items() if name not in self.unread
                and (window is None or not self._past(name, window))]

    def _past(self, name: str, window: int) -> bool:
        plan = self.plans[name]
        current = plan.window_of(self.positions[name] // plan.iterations_per_epoch)
        return current > window and window not in self.wanted_by(name)

    def horizon(self, span: int) -> set[int]:
        """The `span` windows after each active one that are not active themselves."""
        horizon = {w + ahead for w in self.windows for ahead in range(1, span + 1)
                   if any(p.window_epochs(w + ahead) for p in self.plans.values())}
        return horizon - set(self.windows)

    def window_of_task(self, task: str, epoch: int) -> int | None:
        plan = self.plans.get(task)
        return plan.window_of(epoch) if plan else None

    def view(self, key: ViewKey) -> tuple[int, ViewOf] | None:
        """The active window a batch is planned in, and what it is."""
        for index in self._window_of.get(getattr(key, "plan_key", None), ()):
            view = self._windows[index].views.get(key)
            if view is not None:
                return index, view
        return None

    def readers_of(self, key: ViewKey) -> set[str]:
        return {task for task, _ in self._readers(key)}

    def _readers(self, key: ViewKey) -> tuple[tuple[str, int], ...]:
        """(task, position) of each reader of the batch in its active window."""
        for index in self._window_of.get(getattr(key, "plan_key", None), ()):
            readers = self._windows[index].readers.get(key)
            if readers is not None:
                return readers
        return ()

    def _learn(self, plan_keys: Iterable[object], window: int) -> None:
        """These plan keys have batches in the window."""
        for plan_key in plan_keys:
            windows = self._window_of.get(plan_key, ())
            if window not in windows:
                self._window_of[plan_key] = (*windows, window)

    def add_window(self, plan: WindowPlan) -> None:
        """A window planned whole, or its lead part (`extend` adds the rest)."""
        self._windows[plan.window] = plan
        self._learn(plan_keys_of(plan.readers), plan.window)

    def drop_window(self, window: int) -> WindowPlan:
        plan = self._windows.pop(window)
        for plan_key, windows in list(self._window_of.items()):
            if window in windows:
                others = tuple(w for w in windows if w != window)
                if others:
                    self._window_of[plan_key] = others
                else:
                    del self._window_of[plan_key]
        return plan

    def later(self, window: int, ahead: int) -> list[tuple[int, Mapping[str, VideoWork]]]:
        """The videos of the active and future windows after `window`, up to `ahead` of it, in
        order, each window once. A window in parts has its parts' videos, then the others of
        the plan made to carry for it (kept in `future` until it is whole): listed twice, its
        parts' entry had none of the videos not planned yet, and a pass counted a video both
        held twice against the room to carry."""
        later = []
        for index in range(window + 1, window + ahead + 1):
            active, future = self._windows.get(index), self.future.get(index)
            if active is not None and future is not None and index in self.rest_pending:
                later.append((index, ChainMap(active.videos, future.videos)))
            elif active is not None or future is not None:
                later.append((index, (future if active is None else active).videos))
        return later

    # -- tasks joining and leaving ----------------------------------------------------------

    def add_task(self, plan: TaskPlan) -> None:
        self.generation += 1
        self.plans[plan.name] = plan
        self.positions[plan.name] = 0
        self.open_positions[plan.name] = Counter()
        self.owners[plan.name] = owner_key(plan)
        if not makes_ahead_unread(plan.cfg.access.registrar):
            self.unread.add(plan.name)
        self.future.clear()  # planned again with the new task

    def merge(self, window: int, part: WindowPlan, own: Container[ViewKey] = frozenset()
              ) -> Merged:
        """Plan a joining task's part into an active window: a batch planned already (an
        identical pipeline) gets one more reader. `own`: batches the task's lead part added,
        whose readers are in already; its later parts add the other videos' clips. A batch
        it reads already (an earlier part's reader of another task's batch) is left as it is."""
        base = self.windows[window]
        new_views, more_readers = {}, {}
        for key, readers in part.readers.items():
            if key in own:
                continue
            if key in base.views:
                more = tuple(r for r in readers if r not in base.readers[key])
                if more:
                    base.readers[key] = base.readers[key] + more
                    more_readers[key] = frozenset(task for task, _ in more)
                continue
            new_views[key] = base.views[key] = part.views[key]
            base.readers[key] = readers
            self._learn((key.plan_key,), window)
            if key in part.view_plans:
                base.view_plans[key] = part.view_plans[key]
        uses = {}
        for path, work in part.videos.items():
            mine = kept(work.uses, lambda view: view in new_views or view in own)
            if mine:
                video = base.videos.setdefault(path, VideoWork(work.info, work.plan, window))
                video.uses = video.uses + mine  # not in place: the board's pending list
                uses[path] = mine
        return Merged(new_views, more_readers, uses,
                      {k: base.view_plans[k] for k in new_views if k in base.view_plans})

    def extend(self, window: int, rest: WindowPlan) -> None:
        """The rest of a window planned in part: its other batches and videos."""
        base = self.windows[window]
        self._learn({key.plan_key for key in base.take_rest(rest)}, window)
        join_videos(base.videos, rest.videos)  # as columns where both are
        base.failed.update(rest.failed)

    def add_reader(self, window: int, plan: TaskPlan,
                   keys: Iterable[ViewKey] | None = None) -> list[ViewKey]:
        """A task joining the tasks a window is planned in parts for reads their batches
        planned so far (`keys`: of those, these), the same keys (a search's trials with one
        seed; of its epochs only: it may read fewer); the batches it reads now."""
        base, added, per_epoch = self.windows[window], [], plan.iterations_per_epoch
        epochs = plan.window_epochs(window)
        if keys is None:
            keys = [view_key(plan, epoch, iteration) for epoch in epochs
                    for iteration in range(per_epoch)]
        for key in (k for k in keys if k.epoch in epochs):
            reader = (plan.name, key.epoch * per_epoch + key.iteration)
            readers = base.readers.get(key)
            if readers is not None and reader not in readers:
                base.readers[key] = (*readers, reader)
                added.append(key)
        return added

    def remove_task(self, name: str) -> dict[ViewKey, ViewOf]:
        """Forget a task; the batches no other task reads, released from every window."""
        self.generation += 1
        self.plans.pop(name, None)
        self.positions.pop(name, None)
        self.open_positions.pop(name, None)
        self.unread.discard(name)
        self.read_at.pop(name, None)
        self.read_window.pop(name, None)
        self.owners.pop(name, None)
        self.parts_pending.pop(name, None)
        return self._release(name)

    def rest_task(self, name: str) -> dict[ViewKey, ViewOf]:
        """An idle task makes nothing ahead until read again, as one never read: its batches no
        other task reads, released from every window (read again, its views are made on
        demand until the window after that read is planned: the same bytes)."""
        self.generation += 1
        self.unread.add(name)
        self.parts_pending.pop(name, None)
        return self._release(name)

    def _release(self, name: str) -> dict[ViewKey, ViewOf]:
        self.future.clear()
        released: dict[ViewKey, ViewOf] = {}
        for window in self.windows.values():
            for key in list(window.readers):
                before = window.readers[key]
                readers = tuple(r for r in before if r[0] != name)
                if readers:
                    if len(readers) < len(before):  # else the batch's own, not a copy
                        window.readers[key] = readers
                    continue
                del window.readers[key]
                released[key] = window.views.pop(key)
                window.view_plans.pop(key, None)
            if released:  # as columns: a tuple of new records was 3.8 us a clip on the loop
                for work in window.videos.values():
                    mask = [view not in released for view in row_views(batches(work.uses))]
                    if not all(mask):
                        work.uses = selected(work.uses, mask)
        return released


def owner_key(plan: TaskPlan) -> int:
    return share_owner(plan.cfg.access.owner, plan.cfg.access.registrar)
