"""What a job takes when it starts: room for the frames it decodes (and those it carries to
later windows), the buffers of the batches it fills in memory, and the clips that pruning keeps
on disk. A video job takes the pending clips whose batches fit in memory, plus those pruning
keeps on disk; the rest wait for a later job. A decode pass that would carry the next
window's frames may take that window's clips instead, to disk (`_ahead`). None: the job cannot
start now.

A clip that goes into a batch in memory is also written to disk only where it may be read from
there: always when reuse was asked for (`keeps_read`: a storage budget given), else when other
tasks read it too (a search, whose later trials read it again), when its batch is far enough
ahead that nearer ones may push it out of memory unread, or when memory is short. The others
are read once, from memory: writing them cost a cold run 8% of the daemon's CPU
(docs/performance.md#the-store-and-the-disk), and a restart decodes them again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from sandfs.materialize import FrameKey
from sandfs.plan.window import ClipUse, VideoWork, ViewKey
from sandfs.sched.board import BatchBoard
from sandfs.sched.carry import CarryBook
from sandfs.sched.jobs import AssemblyJob, Carry, VideoJob, VideoJobKey
from sandfs.sched.memory import MemoryLedger
from sandfs.sched.objects import (
    DiskPlan,
    Spot,
    clip_nbytes,
    first_reader,
    frame_nbytes,
    kept_frame_nbytes,
    pass_frame_bytes,
)
from sandfs.sched.windows import WindowBook

# The next window's clips are made in the pass when they take at most this many times the
# bytes of the frames it would carry there: the clips are written once, where carried frames
# are written, read back and augmented by a job of their own (docs/performance.md#decoding-ahead).
AHEAD_BYTES_RATIO = 2


class Admission:
    def __init__(self, *, book: WindowBook, board: BatchBoard, carry: CarryBook,
                 memory: MemoryLedger, running: Mapping, keeps_on_disk: bool,
                 keeps_read: bool = True) -> None:
        self.book, self.board, self.carry, self.memory = book, board, carry, memory
        self.running = running  # the scheduler's running jobs, by key
        self.keeps_on_disk = keeps_on_disk  # an object store is there
        self.keeps_read = keeps_read  # clips of batches in memory go to disk too, always

    def video(self, job_key: VideoJobKey, *, demanded: bool) -> VideoJob | None:
        """The pending clips of this video that can go somewhere now: into a batch that fits in
        memory, or to disk when pruning keeps them there. Most urgent first."""
        video = self.book.windows[job_key.window].videos[job_key.path]
        disk = self.board.disk_plans.get(job_key, DiskPlan())
        frames_on_disk = job_key in self.carry.frames_on_disk
        pending = self.board.pending[job_key]
        kept = video.frame_keys if disk.frames and self.keeps_on_disk else frozenset()
        own_bytes = self._frame_bytes(video, pending, kept, frames_on_disk)
        free = self.memory.room_for_frames(own_bytes, demanded=demanded)
        if free is None:
            return None
        carry = {} if frames_on_disk else self.carry.plan(
            job_key, self.book.later(job_key.window, self.carry.span),
            busy=set(self.running), pending=self.board.pending, active=self.book.windows,
            memory_room=self.memory.room_to_carry(free))
        ahead = self._ahead(job_key, carry[job_key.window + 1]) if (
            job_key.window + 1 in carry) else []
        if ahead:
            del carry[job_key.window + 1]  # its clips are made instead, from the same frames
        frame_bytes = own_bytes if not (ahead or carry) else self._frame_bytes(
            video, [*pending, *ahead], kept.union(*(c.keys for c in carry.values())),
            frames_on_disk)  # the same pass again only where it makes or carries more
        free = self.memory.make_room(frame_bytes - own_bytes, free)  # ahead or carried
        uses, to_memory, to_disk, reserved = [], set(), set(), set()
        for use in sorted(pending, key=lambda u: self.book.deadline_of(u.view)):
            spot = Spot.of(use)
            keep = spot in disk.clips and self.keeps_on_disk
            wanted = demanded and use.view in self.board.demanded
            fits = use.view in reserved
            if not fits and (not keep or self.memory.near(use.view, demanded=wanted)):
                fits, free = self.memory.reserve_buffer(use.view, free, demanded=wanted)
                if fits:
                    reserved.add(use.view)
                elif wanted:
                    return None  # wait for the memory a running job frees, then fill it
            if fits:
                to_memory.add(spot)
            if keep and (not fits or self.read_from_disk(use, demanded=wanted)):
                to_disk.add(spot)
            if fits or keep:
                uses.append(use)
        if not uses:
            return None
        uses += ahead
        ahead_spots = frozenset(Spot.of(use) for use in ahead)
        views = self.board.views
        return VideoJob(
            job_key, video, tuple(uses), frozenset(to_memory), frozenset(to_disk) | ahead_spots,
            save_frames=disk.frames and self.keeps_on_disk, frames_on_disk=frames_on_disk,
            frame_bytes=frame_bytes, carry=carry,
            deadlines={u.view: first_reader(u) for u in uses},
            layouts={u.view: views.state(u.view).plan.sampling.layout for u in uses},
            states={u.view: views.state(u.view) for u in uses}, ahead=ahead_spots,
            ahead_of=VideoJobKey(job_key.window + 1, job_key.path) if ahead else None)

    @staticmethod
    def _frame_bytes(video: VideoWork, uses: Sequence[ClipUse], held: AbstractSet[FrameKey],
                     frames_on_disk: bool) -> int:
        """What a job over `uses` holds of decoded frames at most (the ledger charges it while
        it runs): a pass its peak, frames read from disk all of the window's at once. Each
        pass lets a frame go after its last clip, so it held less than all its frames: charged
        them all, a pass started when memory was full of the first batches could neither carry
        the next window's frames nor make its clips, and that window decoded the video again
        (docs/performance.md#memory). Clips a later job makes instead only lower the peak."""
        if frames_on_disk:
            return sum(frame_nbytes(video.info, k) for k in video.frame_keys)
        return pass_frame_bytes(video.info, uses, held)

    def _ahead(self, job_key: VideoJobKey, carried: Carry) -> list[ClipUse]:
        """The clips of the video's next window that this decode pass makes too, to disk,
        where it would carry that window's frames there (`carried`: decode ahead asked for,
        room on disk and in memory): when that window is active (its batches on the board),
        pruning keeps every one of those clips on disk, and they take at most AHEAD_BYTES_RATIO
        times the bytes of the frames carried. Carried frames are written and read back whole
        by a job of their own, then cropped; the clips are written once and read back into
        their batches (docs/performance.md#decoding-ahead)."""
        following = VideoJobKey(job_key.window + 1, job_key.path)
        window = self.book.windows.get(following.window)
        pending = self.board.pending.get(following)
        disk = self.board.disk_plans.get(following)
        if (window is None or not pending or disk is None
                or any(Spot.of(u) not in disk.clips for u in pending)):
            return []
        info = window.videos[following.path].info
        clip_bytes = sum(clip_nbytes(self.board.views.plan_of(u.view), u) for u in pending)
        frame_bytes = sum(kept_frame_nbytes(info, k, carried.firsts.get(k)) for k in carried.keys)
        return list(pending) if clip_bytes <= AHEAD_BYTES_RATIO * frame_bytes else []

    def read_from_disk(self, use: ClipUse, *, demanded: bool) -> bool:
        """May this clip, made into its batch in memory, be read from disk too (module doc)?"""
        return (self.keeps_read or len({task for task, _ in use.readers}) > 1
                or not self.memory.near(use.view, demanded=demanded)
                or self.memory.under_pressure())

    def assembly(self, key: ViewKey, *, demanded: bool) -> AssemblyJob | None:
        """Reading a batch's clips back from disk, once its buffer fits."""
        fits, _ = self.memory.reserve_buffer(key, self.memory.free_bytes, demanded=demanded)
        if not fits:
            return None
        state = self.board.views.state(key)
        return AssemblyJob(key, state.plan, state.view,
                           tuple(sorted(state.on_disk - state.in_memory)), {key: state})
