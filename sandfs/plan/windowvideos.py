"""A window's videos as columns, not a record and a dict entry a video: its uses grouped by video
(`UseColumns`), each video's probe and plan by its group, and its path found by the path's hash
(`HashRows`). A video's `VideoWork` is made when it is looked up; a `VideoWork` and its dict entry
were ~17 bytes a clip of a window (5 clips a video; docs/performance.md#a-windows-batches-and-
the-board). What changes later (a task joining adds uses, the rest of a window planned in parts
adds videos, a task leaving takes uses) is held beside the columns as records, as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sandfs.plan.hashrows import HashRows
from sandfs.plan.uses import ClipUse, UseColumns, frame_rows, kept

if TYPE_CHECKING:
    from sandfs.media.types import VideoInfo
    from sandfs.plan.task import TaskPlan
    from sandfs.plan.window import ViewKey


@dataclass(slots=True)
class VideoWork:
    info: VideoInfo
    plan: TaskPlan  # a plan that knows this video (for its ops and layout)
    window: int
    # `Uses` or a tuple: replaced, never changed in place (the board's pending clips may be it)
    uses: Sequence[ClipUse] = ()

    @property
    def frames(self) -> set[int]:
        return {i for _, _, frames, _ in frame_rows(self.uses) for i in frames}

    @property
    def frame_keys(self) -> set[tuple]:
        """(index, source) of every frame the uses need: a frame wanted at full size and
        scaled in the decoder (decode_resize) is two objects from one decode."""
        return {(i, source) for _, _, frames, source in frame_rows(self.uses) for i in frames}


class ColumnVideo:
    """A video of a window's columns as its `VideoWork` reads, made on demand: setting its
    `uses` replaces them in the window (a record from then on)."""

    __slots__ = ("_group", "_videos")

    def __init__(self, videos: WindowVideos, group: int) -> None:
        self._videos, self._group = videos, group

    @property
    def info(self) -> VideoInfo:
        return self._videos.infos[self._group]

    @property
    def plan(self) -> TaskPlan:
        videos = self._videos
        return videos.plans[videos.plan_of[self._group]]

    @property
    def window(self) -> int:
        return self._videos.window

    @property
    def uses(self) -> Sequence[ClipUse]:
        return self._videos.group_uses(self._group)

    @uses.setter
    def uses(self, uses: Sequence[ClipUse]) -> None:
        self._videos.replace(self._group, VideoWork(self.info, self.plan, self.window, uses))

    frames = VideoWork.frames
    frame_keys = VideoWork.frame_keys

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ColumnVideo | VideoWork):
            return NotImplemented
        return (self.info, self.plan, self.window) == (other.info, other.plan, other.window) and (
            list(self.uses) == list(other.uses))

    __hash__ = None  # type: ignore[assignment]  # as VideoWork's


class WindowVideos(MutableMapping[str, "VideoWork | ColumnVideo"]):
    """A window's videos by path, in the order their first uses were planned: groups of the
    window's `UseColumns` (`infos`, `plan_of`: each group's probe and plan), and the videos
    added or replaced since (`VideoWork`s, after the groups). `leave_out`: batches whose uses
    are left out (a snapshot's, or those released), a byte a batch; a video with none left is
    not in the mapping."""

    def __init__(self, window: int, columns: UseColumns, infos: Sequence[VideoInfo],
                 plans: Sequence[TaskPlan], plan_of: Sequence[int]) -> None:
        if not len(columns) == len(infos) == len(plan_of):
            raise ValueError(f"{len(columns)} groups, {len(infos)} probes, {len(plan_of)} plans")
        self.window, self.columns = window, columns
        self.infos = list(infos)
        self.plans = list(plans)
        self.plan_of = array("B" if len(self.plans) < 256 else "H", plan_of)
        self._index, order = HashRows.of([info.path for info in self.infos])
        self._group_of = order.astype(np.int32)  # each hash row's group
        self._records: dict[int, VideoWork] = {}  # groups replaced since
        self._added: dict[str, VideoWork] = {}  # videos not in the groups
        self._gone = bytearray()  # per batch row: its uses left out (empty: none)
        self._empty: set[int] = set()  # groups with no use left (`_gone`) or deleted

    # -- reading ----------------------------------------------------------------------------

    def group_of(self, path: str) -> int:
        """The group of the video `path` (-1: none, or added since)."""
        row = self._index.row(path)
        return -1 if row < 0 else int(self._group_of[row])

    def groups_of(self, paths: Sequence[str]) -> np.ndarray:
        """Each path's group (-1: none), looked up at once."""
        rows = self._index.rows(paths)
        return np.where(rows >= 0, self._group_of[np.maximum(rows, 0)], -1)

    @property
    def unchanged(self) -> bool:
        """Every video is its group as planned, in order: none replaced, added or left out."""
        return not (self._records or self._added or self._empty or self._gone)

    def group_uses(self, group: int) -> Sequence[ClipUse]:
        """The uses of a group's video (those of batches not left out)."""
        record = self._records.get(group)
        if record is not None:
            return record.uses
        columns = self.columns
        uses = columns.group(group)
        if not self._gone:
            return uses
        gone = self._gone
        rows = columns.batch[columns.starts[group]:columns.starts[group + 1]]
        mask = [not gone[row] for row in rows]
        return uses if all(mask) else uses.select(mask)

    def __getitem__(self, path: str) -> VideoWork | ColumnVideo:
        added = self._added.get(path)
        if added is not None:
            return added
        group = self.group_of(path)
        if group < 0 or group in self._empty:
            raise KeyError(path)
        return self._records.get(group) or ColumnVideo(self, group)

    def __iter__(self) -> Iterator[str]:
        infos, empty = self.infos, self._empty
        if empty:
            yield from (infos[g].path for g in range(len(infos)) if g not in empty)
        else:
            yield from (info.path for info in infos)
        yield from list(self._added)

    def __len__(self) -> int:
        return len(self.infos) - len(self._empty) + len(self._added)

    def __contains__(self, path: object) -> bool:
        if path in self._added:
            return True
        group = self.group_of(path)  # type: ignore[arg-type]
        return group >= 0 and group not in self._empty

    # -- changing ---------------------------------------------------------------------------

    def replace(self, group: int, work: VideoWork) -> None:
        """A group's video from now on: `work` (its uses replaced)."""
        self._records[group] = work

    def __setitem__(self, path: str, work: VideoWork | ColumnVideo) -> None:
        if isinstance(work, ColumnVideo):
            work = VideoWork(work.info, work.plan, work.window, work.uses)
        group = self.group_of(path)
        if group >= 0 and group not in self._empty and path not in self._added:
            self._records[group] = work  # in its place, as a dict's value replaced
        else:  # a new key, or one deleted: at the end
            self._added[path] = work

    def __delitem__(self, path: str) -> None:
        if self._added.pop(path, None) is not None:
            return
        group = self.group_of(path)
        if group < 0 or group in self._empty:
            raise KeyError(path)
        self._records.pop(group, None)
        self._empty.add(group)

    def kept_only(self, wanted: Callable[[ViewKey], bool]) -> WindowVideos:
        """A copy with the uses of batches `wanted` only, and only the videos left some: the
        columns shared, the groups' uses left out a batch at a time (a byte a batch), no
        record made but for those held as records already."""
        copy = WindowVideos.__new__(WindowVideos)
        copy.window, copy.columns, copy.infos = self.window, self.columns, self.infos
        copy.plans, copy.plan_of = self.plans, self.plan_of
        copy._index, copy._group_of = self._index, self._group_of
        rows = self.columns.rows
        gone = bytearray(not wanted(row.view) for row in rows)
        if self._gone:
            gone = bytearray(a | b for a, b in zip(gone, self._gone, strict=True))
        copy._gone = gone if any(gone) else bytearray()
        copy._empty = set(self._empty) | _emptied(self.columns, copy._gone)
        copy._records = {}
        for group, work in list(self._records.items()):
            uses = kept(work.uses, wanted)
            copy._empty.discard(group)
            if uses:
                copy._records[group] = VideoWork(work.info, work.plan, work.window, uses)
            else:
                copy._empty.add(group)
        copy._added = {}
        for path, work in list(self._added.items()):
            uses = kept(work.uses, wanted)
            if uses:
                copy._added[path] = VideoWork(work.info, work.plan, work.window, uses)
        return copy


def _emptied(columns: UseColumns, gone: bytearray) -> set[int]:
    """The groups all of whose uses are in batches `gone`."""
    if not gone:
        return set()
    alive = ~np.frombuffer(gone, bool)[np.frombuffer(columns.batch, np.int32)]
    starts = np.frombuffer(columns.starts, np.int64)
    left = np.add.reduceat(alive.astype(np.int64), starts[:-1]) if len(alive) else np.zeros(
        len(starts) - 1, np.int64)
    left[starts[:-1] == starts[1:]] = 0  # reduceat gives an empty range its next value
    return set(np.flatnonzero(left == 0).tolist())
