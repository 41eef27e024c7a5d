"""A task's listed videos as the lazy scan probes them: planning asks for a video's probe only
when it needs the video's frames (docs/contract.md#lazy-scan)."""

from __future__ import annotations

from collections.abc import Sequence

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

    def known(self, index: int) -> VideoInfo | BadVideo | None:
        return self.probes.known(self.listed[index].rel_path)

    def usable(self, index: int) -> bool:
        return isinstance(self.probes.result(self.listed[index].rel_path), VideoInfo)

    def want(self, indices: Sequence[int]) -> None:
        """Probe these next: they are about to be waited for."""
        self.probes.want([self.listed[i].rel_path for i in indices])
