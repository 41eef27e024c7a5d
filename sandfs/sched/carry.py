"""The carry book: frames a decode pass makes for later windows of its video (decode ahead),
and which (window, video)s have all their frames on disk. With one keyframe per video a pass
decodes from the start anyway: decoding a later window's frames too and keeping them on disk
saves that window a pass.

A video's passes repeat every `decode_ahead + 1` windows, shifted per video (`next_pass`): the
first window's pass carries up to `2 x decode_ahead` windows, so from then on each window
decodes its share of the videos. Without the shift every video's pass fell on the same
window, whose start then waited for the whole dataset to be decoded (a 100-epoch run stalled
~3 s every 4 windows)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import numpy as np
import trio

from sandfs.cache import ObjectStore
from sandfs.materialize import FrameKey, first_ops
from sandfs.plan.window import ClipUse, VideoWork, WindowPlan
from sandfs.sched.jobs import Carry, VideoJob, VideoJobKey
from sandfs.sched.objects import first_reader, frame_nbytes

CARRY_STORE_FRACTION = 0.5  # frames carried for later windows: while the store is below this
CARRY_MEMORY_SHARE = 4  # and within this fraction (1/N) of the memory limit


class CarryBook:
    def __init__(self, store: ObjectStore | None, *, memory_limit_bytes: int,
                 decode_ahead: int) -> None:
        self.store = store
        self.memory_limit_bytes = memory_limit_bytes
        self.decode_ahead = decode_ahead  # later windows a decode pass prepares frames for
        self.carried: set[VideoJobKey] = set()  # a running job decodes their frames
        self.nbytes = 0  # frames decoded for later windows, waiting to be written (`hold`)
        self.frames_on_disk: set[VideoJobKey] = set()  # frames all on disk
        self.limiter = trio.CapacityLimiter(1)  # writes beside the workers, one at a time

    @property
    def span(self) -> int:
        """The most windows after its own that a pass carries for."""
        return 2 * self.decode_ahead

    def next_pass(self, path: str, window: int) -> int:
        """The window of this video's next decode pass after `window` (a pass at `window`
        carries for the windows between)."""
        period = self.decode_ahead + 1
        first = period + zlib.crc32(path.encode()) % period  # the pass after the first window's
        if window < first:
            return first
        return window + period - (window - first) % period

    def plan(self, key: VideoJobKey, later: list[tuple[int, Mapping[str, VideoWork]]], *,
             busy: set[VideoJobKey], pending: Mapping[VideoJobKey, tuple[ClipUse, ...]],
             active: Mapping[int, WindowPlan], memory_room: int) -> dict[int, Carry]:
        """The frames `later` windows (their videos: `WindowBook.later`) need from this video
        that no job made yet, up to the video's next pass and for as many windows as fit in
        half the storage budget, a quarter of the memory limit and `memory_room` (the memory
        free now). `busy`: running jobs; `pending`: clips not made yet, of the videos the
        `active` windows planned (a window in parts: not its videos not planned yet)."""
        if self.store is None:
            return {}
        room = min(self.store.room_below(CARRY_STORE_FRACTION),
                   self.memory_limit_bytes // CARRY_MEMORY_SHARE, memory_room)
        carry, nbytes = {}, 0
        next_pass = self.next_pass(key.path, key.window)
        for index, videos in later:
            if index >= next_pass:
                break
            work, other = videos.get(key.path), VideoJobKey(index, key.path)
            if (work is None or other in self.frames_on_disk or other in busy
                    or other in self.carried or _all_made(other, active, pending)):
                continue
            keys = work.frame_keys
            size = sum(frame_nbytes(work.info, k) for k in keys)
            if nbytes + size > room:
                break
            nbytes += size
            deadline = min(map(first_reader, work.uses))
            carry[index] = Carry(frozenset(keys), deadline, first_ops(u.clip for u in work.uses))
        return carry

    def hold(self, carried: Mapping[int, Mapping[FrameKey, np.ndarray]]) -> int:
        """A job's carried frames wait in memory to be written: their bytes, counted until
        `written`."""
        nbytes = sum(f.nbytes for frames in carried.values() for f in frames.values())
        self.nbytes += nbytes
        return nbytes

    def written(self, job: VideoJob, nbytes: int) -> None:
        """The frames `hold` counted are written (or given up): memory and the job's later
        windows are free again."""
        self.nbytes -= nbytes
        self.release(job)

    def claim(self, job: VideoJob) -> None:
        self.carried |= self._carried_by(job)

    def release(self, job: VideoJob) -> None:
        self.carried -= self._carried_by(job)

    @staticmethod
    def _carried_by(job: VideoJob) -> set[VideoJobKey]:
        return {VideoJobKey(later, job.key.path) for later in job.carry}

    def note_on_disk(self, saved: Iterable[VideoJobKey], planned: Iterable[int]) -> None:
        """Videos whose frames are all on disk now, in the `planned` windows (a window dropped
        meanwhile checks the store again when it is planned)."""
        planned = set(planned)
        self.frames_on_disk |= {key for key in saved if key.window in planned}

    def forget(self, windows: Iterable[int]) -> None:
        """Windows no longer planned (or to be planned again)."""
        gone = set(windows)
        if gone:
            self.frames_on_disk = {k for k in self.frames_on_disk if k.window not in gone}


def _all_made(key: VideoJobKey, active: Mapping[int, WindowPlan],
              pending: Mapping[VideoJobKey, tuple[ClipUse, ...]]) -> bool:
    """Are the video's clips in an active window all made: planned there, none pending? A
    window in parts has not planned its other videos yet."""
    return (key.window in active and not pending.get(key)
            and key.path in active[key.window].videos)
