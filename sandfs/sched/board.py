"""The batch board: every batch of the active windows, from planned to ready, and the memory
they hold. A batch with every slot filled in memory is ready; memory past the limit drops ready
batches — those every reader has read first, then those needed last — to be rebuilt from disk,
or recomputed. A new batch is filled in the buffer of a batch every reader has read, of its
size (`reuse_buffer`), memory short or not: fresh pages cost the kernel a zeroing each (and
this VM's host far more). While memory is free the batches read last are spared."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sandfs.media.gop import keyframe_at_or_before
from sandfs.media.types import VideoInfo
from sandfs.npy import npy_buffer, npy_nbytes
from sandfs.plan.task import ViewPlan
from sandfs.plan.uses import selected
from sandfs.plan.window import ClipUse, ViewKey
from sandfs.runtime import collector_paused
from sandfs.sched.diskplans import DiskPlans
from sandfs.sched.flights import Flights
from sandfs.sched.jobs import Job, JobResult, PlannedWindow, VideoJob, VideoJobKey
from sandfs.sched.objects import DiskPlan, Spot
from sandfs.sched.onboard import OnBoard
from sandfs.sched.pending import PendingClips, PendingColumns
from sandfs.sched.policy import JobState
from sandfs.sched.ready import ReadyView
from sandfs.sched.urgency import UrgencyOrder
from sandfs.sched.viewstate import ViewState
from sandfs.sched.windows import Merged, ViewOf


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a job's result did to the board."""

    recomputed: int  # clips made a second time in this run
    touched: list[ViewKey]  # batches that may be complete now
    failed: dict[ViewKey, str]  # batches failed now (a step failed on one of their clips): why


# read batches whose buffers no new batch takes: the last ones read (`take` keeps `ready` in
# the order batches were taken), for a client that opens a file again right after reading it
REREAD_KEPT = 2


class BatchBoard:
    def __init__(self, allocate: Callable[[int], np.ndarray] | None = None) -> None:
        """`allocate(nbytes)`: where new batch buffers live (uint8; None: the heap)."""
        self.allocate = allocate
        self.views = OnBoard()  # batches of active windows, not ready yet (states in flight)
        self.ready: OrderedDict[ViewKey, ReadyView] = OrderedDict()
        # clips no job made yet: a window's columns less what was taken (`PendingClips`)
        self.pending = PendingClips()
        # a reader is blocked on it, or expected there soon: read anywhere (a job's thread
        # reads whether it is empty), written by the demand methods below and on completion
        self.demanded: set[ViewKey] = set()
        self.flights = Flights()
        # what pruning keeps on disk, for the jobs that keep anything (most keep nothing at
        # scale: no record for them)
        self.disk_plans = DiskPlans()
        self.made: set[Spot] = set()  # made in this run: a second time is a recompute
        self.evicted_unread = 0
        self.waiting: Counter[ViewKey] = Counter()  # readers blocked on each batch (ditto)
        self.urgency = UrgencyOrder(numbers=self.pending)  # pending jobs in each task's read order
        self._work: dict[VideoJobKey, tuple] = {}  # `_work_of`'s memo, by pending job
        # batches of `views` with every slot's clip made: the only ones to read back from disk.
        # Slots are only ever added to a batch's state, so a batch stays here until it leaves
        # `views`; kept as they change, not found by walking every batch at each dispatch
        # (2,500 of them at 1,000 videos: 40% of the trio loop's time)
        self.covered: set[ViewKey] = set()

    @property
    def demand_waiting(self) -> int:
        return self.waiting.total()

    # -- demand: `demanded` and `waiting` change here only ------------------------------------

    def wait_started(self, key: ViewKey) -> None:
        """A reader blocks on the batch `key`: its jobs come first until it is made."""
        self.demanded.add(key)
        self.waiting[key] += 1

    def wait_ended(self, key: ViewKey) -> None:
        """That reader stopped waiting (the batch was made, failed, or the read was
        interrupted); the batch stays demanded until it is made, failed or dropped."""
        self.waiting[key] -= 1
        if not self.waiting[key]:
            del self.waiting[key]

    def anticipate(self, key: ViewKey) -> None:
        """A reader is expected at `key` soon (`WindowPlanner._anticipate`)."""
        self.demanded.add(key)

    def unanticipate(self, key: ViewKey) -> None:
        """No reader is expected at `key` any more: no longer demanded, unless one waits."""
        if not self.waiting[key]:
            self.demanded.discard(key)

    # -- reading ----------------------------------------------------------------------------

    def state_of(self, key: ViewKey) -> str:
        """Ready means in memory or complete on disk."""
        if self.flights.failed(key):
            return "failed"
        if key in self.ready:
            return "ready"
        state = self.views.peek(key)
        if state is None:
            return "planned"
        if len(state.on_disk) == state.slots:
            return "ready"
        return "materializing" if state.on_disk or state.in_memory else "planned"

    def held_view(self, key: ViewKey) -> ViewPlan | None:
        """The batch's plan, when it is active or ready (None: not resolved here)."""
        ready = self.ready.get(key)
        return ready.view if ready is not None else self.views.view_of(key)

    def is_planned(self, key: ViewKey) -> bool:
        """True when the view is ready or a job is making (or will make) it."""
        return key in self.ready or key in self.views

    def take(self, key: ViewKey, task: str) -> ReadyView | None:
        """A ready batch, read by `task` now."""
        ready = self.ready.get(key)
        if ready is None:
            return None
        ready.readers_left.discard(task)
        self.ready.move_to_end(key)
        return ready

    def add_reader(self, keys: Iterable[ViewKey], task: str) -> None:
        """`task` will read these batches too (those ready: the others are not made yet)."""
        for key in keys:
            if key in self.ready:
                self.ready[key].readers_left.add(task)

    def forget_reader(self, task: str) -> None:
        """`task` reads no ready batch any more (it left, or idles)."""
        for ready in self.ready.values():
            ready.readers_left.discard(task)

    def pending_jobs(self) -> list[VideoJobKey]:
        return self.pending.jobs()

    def pending_count(self) -> int:
        return self.pending.count()

    def job_states(self, busy: set, deadline_of: Callable[[ViewKey], int],
                   assemble_within: int,
                   owner_load: Callable[[Iterable[ViewKey]], int] | None = None):
        """(JobState, job key) of the jobs that could run now and are worth ranking: the video
        jobs each task needs soonest and those with clips for a batch a reader is blocked on
        (`UrgencyOrder`), and reading back the batches needed within `assemble_within`
        iterations; `busy`: job keys running, and videos whose frames a running job decodes
        (it leaves them on disk: wait for them)."""
        chosen = self.urgency.urgent(self.pending, busy)
        if self.demanded:
            chosen |= self.urgency.of_views(self.demanded, self.pending) - busy
        for job in chosen:
            uses = self.pending[job]
            remaining_work, leads = self._work_of(job, uses)
            deadline, soonest = min((deadline_of(u.view), i) for i, u in enumerate(uses))
            yield JobState(
                key=f"v{job.window}:{job.path}",
                window=job.window,
                demanded=any(u.view in self.demanded for u in uses),
                deadline_iterations=deadline,
                remaining_work=remaining_work,
                lead_work=leads[soonest],
                owner_load=owner_load(u.view for u in uses) if owner_load else 0,
            ), job
        for key in self.covered:  # batches to read back: those needed soon
            state = self.views.state(key)
            on_disk_only = state.on_disk - state.in_memory  # to read back: no job owes a clip
            if key in busy or not on_disk_only:
                continue
            deadline, demanded = deadline_of(key), key in self.demanded
            if demanded or deadline < assemble_within:
                load = owner_load([key]) if owner_load else 0
                yield JobState(f"a{key.parts}", state.plan.window_of(state.epoch), demanded,
                               deadline, len(on_disk_only), owner_load=load), key

    def _work_of(self, job: VideoJobKey, uses: Sequence[ClipUse]) -> tuple[int, list[int]]:
        """A pending job's remaining work and each clip's lead work, worked out again only
        when its pending clips change: the urgent jobs are ranked at every dispatch, and
        counting their frames was a fifth of the ranking's time. Valid while the job's
        `pending.token` is the same: a loose job's sequence (replaced, never changed in place;
        the memo keeps it, so its id is not reused), or its columns' count of clips left
        (clips are only taken from them)."""
        token = self.pending.token(job)
        kept = self._work.get(job)
        if kept is not None and (kept[0] is token or (type(token) is tuple and kept[0] == token)):
            return kept[1], kept[2]
        remaining = len({i for u in uses for i in u.clip.frame_indices}) + len(uses)
        leads = [self.lead_work(u) for u in uses]
        self._work[job] = (token, remaining, leads)
        return remaining, leads

    def lead_work(self, use: ClipUse) -> int:
        """Frames x pixels a pass decodes to make this clip: from the keyframe before it."""
        plan = self.views.plan_of(use.view)
        if plan is None:
            return 0
        info = plan.videos[use.clip.video_index]
        first, last = min(use.clip.frame_indices), max(use.clip.frame_indices)
        return (last - keyframe_at_or_before(info, first) + 1) * info.width * info.height

    @property
    def memory_bytes(self) -> int:
        """Ready batches and the buffers being filled."""
        ready = sum(r.nbytes for r in self.ready.values())
        return ready + sum(v.buffer.whole.nbytes for _, v in self.views.held()
                           if v.buffer is not None)

    # -- planning ---------------------------------------------------------------------------

    def plan(self, key: ViewKey, state: ViewState, on_disk: Collection[int] = ()) -> None:
        self.views.hold(key, state)
        self.covered.discard(key)
        if on_disk:  # most batches have none: no set made for them
            state.add_on_disk(on_disk)
        if state.on_disk or state.in_memory:  # nor a union to count (`replan` fills some)
            self._note_slots(key, state)

    def _note_slots(self, key: ViewKey, state: ViewState) -> None:
        """After a slot of the batch `key` (in `views`) was added on disk or in memory."""
        if state.covered:
            self.covered.add(key)

    def add_pending(self, job: VideoJobKey, use: ClipUse) -> None:
        """One clip pending again (not kept, or its batch planned again): placed in the
        urgency order, not the order rebuilt (a window of 10,000 videos is 50,000 clips)."""
        self.pending.set(job, (*self.pending.get(job, ()), use))
        self.urgency.add(job, use)

    def take_pending(self, job: VideoJobKey, uses: Iterable[ClipUse]) -> None:
        self.pending.take(job, {(u.view, u.slot) for u in uses})

    def forget_pending(self, views: set[ViewKey] | Callable[[ViewKey], bool]) -> None:
        self.pending.forget(views if callable(views) else views.__contains__)

    def add_window(self, planned: PlannedWindow) -> None:
        """A window's batches (those not planned or ready already) and their pending clips, as
        its planning thread grouped them: nothing here walks the window's clips (1.25M at
        250,000 videos), but where one of its batches is ready already. The collector is
        paused: the window is not frozen out of its walks yet (`runtime.settle_collector`),
        and a full walk over it took most of this call (100,000 videos: 1.6 of 2.1 s)."""
        with collector_paused():
            self._add_window(planned)

    def _add_window(self, planned: PlannedWindow) -> None:
        plan, window = planned.plan, planned.plan.window
        ready = self.views.add_window(plan, self.ready)  # made already, or failed
        for key, slots in planned.on_disk.items():  # a state for those with clips on disk
            if slots and key not in ready and key in self.views:
                state = self.views.state(key)
                state.add_on_disk(slots)
                self._note_slots(key, state)
        self.disk_plans.add(window, planned.disk_plans, planned.frames_on_disk)
        self._add_pending_window(window, planned, ready)

    def _add_pending_window(self, window: int, planned: PlannedWindow, ready: set) -> None:
        """The window's pending clips and its jobs' urgency entries (a job a video of
        `pending`, in order: numbered on from the window's last part where they are columns)."""
        if isinstance(planned.pending, PendingColumns):
            first = self.pending.next_number(window)
            self.urgency.add_entries(planned.urgency, self.pending, first)
            self.pending.add_columns(window, planned.pending, ready.__contains__ if ready else None)
            return
        self.urgency.add_entries(planned.urgency, self.pending)
        for pending, job in zip(planned.pending.values(), planned.urgency.jobs, strict=True):
            if pending and ready:
                pending = tuple(use for use in pending if use.view not in ready)
            if pending:
                self.pending.set(job, self.pending.get(job, ()) + pending)

    def refine_disk_plans(self, window: int, kept: Mapping[str, DiskPlan]) -> None:
        """Pruning's plans for the window's jobs from now on (those started keep theirs);
        frames already on disk stay kept."""
        self.disk_plans.refine(window, kept)

    def add_part(self, window: int, merged: Merged, on_disk: frozenset[Spot]) -> None:
        """A joining task's part of an active window (`WindowBook.merge`)."""
        for key, readers in merged.more_readers.items():
            if key in self.ready:
                self.ready[key].readers_left |= readers
        self.views.rejoin(merged.new_views)  # their window's plan holds them: on the board
        for key, view in merged.new_views.items():
            if key not in self.views:  # a window the board was not given this plan of
                self.plan(key, ViewState.planned(*view, merged.view_plans.get(key)))
        added = []
        for path, uses in merged.uses.items():
            job = VideoJobKey(window, path)
            pends = []
            for use in uses:
                planned = use.view in self.views  # no: its batch failed, or was made already
                stored = planned and Spot.of(use) in on_disk
                if stored:
                    state = self.views.state(use.view)
                    state.add_on_disk((use.slot,))
                    self._note_slots(use.view, state)
                pends.append(planned and not stored)
                if pends[-1]:
                    added.append((job, use))
            if any(pends):  # replaced, not grown: columns joined where both are columns
                self.pending.set(job, self.pending.get(job, ()) + selected(uses, pends))
        self.urgency.add_many(added, self.pending)

    def drop_window(self, window: int, views: Iterable[ViewKey]) -> None:
        self.pending.drop_window(window)
        for key in [k for k in self._work if k.window == window]:
            del self._work[key]
        views = list(views)
        self.views.drop_window(window)
        self.urgency.forget_window(window, views)
        self.disk_plans.drop(window)
        for key in views:
            self.drop(key)

    def replan(self, key: ViewKey, window: int, view: ViewOf, readers: tuple,
               stored: Callable[[ClipUse, VideoInfo], bool]) -> None:
        """Plan a batch again (dropped from memory unread): clips `stored` are on disk, the
        others pending for their video's job."""
        plan, epoch, iteration = view
        state = ViewState.planned(plan, epoch, iteration)
        for slot, clip in enumerate(state.view.clips):
            use = ClipUse(key, slot, clip, readers)
            info = plan.videos[clip.video_index]
            if stored(use, info):
                state.add_on_disk((slot,))
            else:
                self.add_pending(VideoJobKey(window, info.path), use)
        self.plan(key, state)

    def buffer(self, key: ViewKey) -> np.ndarray:
        """The array to fill the batch `key` in (a new one unless `reuse_buffer` gave it one)."""
        state = self.views.state(key)
        if state.buffer is None:
            shape, dtype = state.view.shape, state.view.dtype
            into = None if self.allocate is None else self.allocate(npy_nbytes(shape, dtype))
            state.buffer = npy_buffer(shape, dtype, into=into)
        return state.buffer.array

    def reuse_buffer(self, key: ViewKey, *, spare_last_read: bool = True) -> bool:
        """Give the batch `key` the buffer of a ready batch every reader has read, of the same
        size, that nothing else refers to (`ReadyView.unshared`), the least recently read
        first; that batch leaves memory, as `evict` drops read ones. With `spare_last_read`,
        the REREAD_KEPT batches read last stay, for a client that reads a file twice in a row
        (short of memory they would be evicted anyway, and their buffers are better taken).
        Its memory was counted already: no more is taken. False: there is none."""
        state = self.views.state(key)
        nbytes = state.nbytes
        read = [old for old, ready in self.ready.items() if not ready.readers_left]
        spared = REREAD_KEPT if spare_last_read else 0
        for old in read[:max(0, len(read) - spared)]:
            ready = self.ready[old]
            if ready.nbytes == nbytes and ready.unshared():
                del self.ready[old]
                state.buffer = npy_buffer(state.view.shape, state.view.dtype, into=ready.whole)
                return True
        return False

    # -- settling ---------------------------------------------------------------------------

    def record(self, job: Job, result: JobResult) -> Recorded:
        """A job's clips into their batches (those it started with: a batch dropped and planned
        again meanwhile takes nothing); a batch with a clip the job could not make fails."""
        video = isinstance(job, VideoJob)
        recomputed = 0
        for placed in result.placed:
            use, spot = placed.use, Spot.of(placed.use)
            if video:
                recomputed += spot in self.made
                self.made.add(spot)
            state = self.views.peek(use.view)
            if state is None or state is not job.states.get(use.view):
                continue
            if placed.on_disk:
                state.add_on_disk((use.slot,))
            if placed.in_memory:
                state.add_in_memory(use.slot)
            self._note_slots(use.view, state)
            if video and not placed.in_memory and not placed.on_disk:
                self.add_pending(job.owner(use), use)  # could not be kept: later
        failed: dict[ViewKey, str] = {}
        for clip in result.failed:
            if self.views.peek(clip.use.view) is job.states.get(clip.use.view):
                failed.setdefault(clip.use.view, clip.reason)
        for key, reason in failed.items():
            self.fail(key, reason)
        touched = {placed.use.view for placed in result.placed}
        return Recorded(recomputed, [v for v in touched
                                     if self.views.peek(v) is job.states.get(v)], failed)

    def complete_if_full(self, key: ViewKey, readers: Callable[[], set[str]]) -> ViewState | None:
        """Move a batch with every slot in memory to the ready ones; the batch, or None."""
        state = self.views.peek(key)
        if state is None or state.buffer is None or len(state.in_memory) < state.slots:
            return None
        self.views.leave(key)
        self.covered.discard(key)
        self.ready[key] = ReadyView(state.buffer.whole, readers(), state.view)
        state.buffer = None  # the ready batch holds it alone now: a job's state must not pin it
        self.demanded.discard(key)
        self.flights.settle(key)
        return state

    def fail(self, key: ViewKey, reason: str) -> None:
        """The batch failed: its readers get EIO (remembered), so none waits for it now; still
        demanded, it held the sweep and the planner's idle test off until the window's end."""
        self.views.leave(key)
        self.covered.discard(key)
        self.forget_pending({key})
        self.demanded.discard(key)
        self.flights.fail(key, reason)

    def drop(self, key: ViewKey, *, ready_too: bool = False) -> None:
        """No longer planned: a reader still waiting computes the view on demand."""
        self.views.leave(key)
        self.covered.discard(key)
        if ready_too:
            self.ready.pop(key, None)
        self.demanded.discard(key)
        self.flights.settle(key)

    def read_bytes(self) -> int:
        """Bytes of ready batches every reader has read: what `evict` drops first."""
        return sum(r.nbytes for r in self.ready.values() if not r.readers_left)

    def evict(self, needed_bytes: int, *, keep: ViewKey | None, deadline: int,
              deadline_of: Callable[[ViewKey], int],
              unread_too: bool = True) -> tuple[int, list[ViewKey]]:
        """Drop ready batches from memory to make room for one needed at `deadline`: fully read
        ones (oldest first), then, if `unread_too`, unread ones needed later than it, the
        latest first (they are rebuilt from disk or recomputed) — never one needed sooner,
        which would only trade places with it. Returns the bytes freed and the unread batches
        dropped."""
        freed = 0
        for key in [k for k, r in self.ready.items() if not r.readers_left and k != keep]:
            if freed >= needed_bytes:
                return freed, []
            freed += self.ready.pop(key).nbytes
        if not unread_too:
            return freed, []
        later = [(d, k) for k in self.ready if k != keep and (d := deadline_of(k)) > deadline]
        unread = []
        for _, key in sorted(later, key=lambda item: item[0], reverse=True):
            if freed >= needed_bytes:
                break
            freed += self.ready.pop(key).nbytes
            self.evicted_unread += 1
            unread.append(key)
        return freed, unread
