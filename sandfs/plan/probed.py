"""A task's listed videos as the lazy scan probes them: planning asks for a video's probe only
when it needs the video's frames (docs/contract.md#lazy-scan)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from sandfs.media.probebook import ProbeBook
from sandfs.media.types import BadVideo, ListedVideo, VideoInfo


class NoUsableVideo(Exception):
    """Every video a task lists was found bad: its views cannot be made (EIO)."""


class ProbedVideos(Sequence[VideoInfo]):
    """A task's listed videos by index, as probed: `[i]` waits for video i's probe (planning
    threads only; the event loop asks `known`) and is its VideoInfo, LookupError if bad."""

    def __init__(self, listed: Sequence[ListedVideo], probes: ProbeBook) -> None:
        self.listed, self.probes = listed, probes

    def __len__(self) -> int:
        return len(self.listed)

    def __getitem__(self, index: int) -> VideoInfo:  # type: ignore[override]
        found = self.probes.result(self.listed[index].rel_path)
        if isinstance(found, BadVideo):
            raise LookupError(f"video {found.rel_path!r} is unusable: {found.reason}")
        return found

    def infos(self, indices: Sequence[int]) -> list[VideoInfo]:
        """`[i]` of each, read in one pass but for the probes not in."""
        listed = self.listed
        found = self.probes.results_of([listed[i] for i in indices])
        bad = next((r for r in found if isinstance(r, BadVideo)), None)
        if bad is not None:
            raise LookupError(f"video {bad.rel_path!r} is unusable: {bad.reason}")
        return found  # type: ignore[return-value]

    def known(self, index: int) -> VideoInfo | BadVideo | None:
        return self.probes.known(self.listed[index].rel_path)

    def usable(self, index: int) -> bool:
        return isinstance(self.probes.result(self.listed[index].rel_path), VideoInfo)

    def usable_mask(self, indices: Sequence[int]) -> np.ndarray:
        """`usable` of each, waiting for the probes not in (most are: read in one pass)."""
        listed = self.listed
        found = self.probes.results_of([listed[i] for i in indices])
        return np.fromiter((isinstance(r, VideoInfo) for r in found), bool, len(found))

    def want(self, indices: Sequence[int]) -> None:
        """Probe these next: they are about to be waited for."""
        self.probes.want(self.listed[i].rel_path for i in indices)  # made if a queue asks


class StandIns:
    """The video that fills each listed video's slots: itself when usable, else the next
    usable one by name, wrapping (docs/contract.md#lazy-scan). Found when first asked, kept:
    4 bytes a video (-1: not asked yet), where a dict of ints held ~90."""

    def __init__(self, task: str, videos: ProbedVideos) -> None:
        self.task, self.videos = task, videos
        self.found = np.full(len(videos), -1, np.int32)

    def of(self, index: int) -> int:
        """Video `index`'s stand-in; NoUsableVideo when none is usable. Waits for probes."""
        found = int(self.found[index])
        if found < 0:
            count = len(self.videos)
            found = next((j % count for j in range(index, index + count)
                          if self.videos.usable(j % count)), -1)
            if found < 0:
                raise NoUsableVideo(f"task {self.task}: none of its {count} videos is usable")
            self.found[index] = found
        return found

    def of_many(self, indices: np.ndarray) -> np.ndarray:
        """`of` each (-1 where it raises: a batch holding it says why when resolved alone);
        the usable ones, nearly all, found at once as their own."""
        missing = np.flatnonzero(np.bincount(indices[self.found[indices] < 0],
                                             minlength=len(self.found)))
        with contextlib.suppress(Exception):  # asked one at a time below
            own = missing[self.videos.usable_mask(missing.tolist())]
            self.found[own] = own
        for index in missing[self.found[missing] < 0].tolist():
            with contextlib.suppress(Exception):
                self.of(index)
        return self.found[indices]
