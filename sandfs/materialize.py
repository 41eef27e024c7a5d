"""Turn a planned object into its bytes: decode the needed frames, apply the planned ops, pack.

Blocking code: the engine runs it in worker threads (PyAV and OpenCV release the GIL).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from sandfs import ops as oplib
from sandfs.faults import fault_point
from sandfs.media.decode import decode_frames, frames_to_decode
from sandfs.media.types import VideoInfo
from sandfs.npy import npy_buffer, npy_bytes
from sandfs.plan.task import StreamClip, TaskPlan, ViewPlan
from sandfs.stats import Stats


class Materializer:
    def __init__(self, stats: Stats) -> None:
        self.stats = stats

    def decode(self, info: VideoInfo, indices: set[int]) -> dict[int, np.ndarray]:
        result = decode_frames(info, sorted(indices))
        self.stats.add("frames_decoded", result.frames_decoded)
        fault_point("after_decode")
        return result.frames

    def clip_array(self, clip: StreamClip, frames: dict[int, np.ndarray]) -> np.ndarray:
        out = oplib.apply_chain(clip.ops, [frames[i] for i in clip.frame_indices])
        return np.stack(out)

    def fill_view(self, plan: TaskPlan, view: ViewPlan, batch: np.ndarray) -> None:
        by_video: dict[int, set[int]] = defaultdict(set)
        for clip in view.clips:
            by_video[clip.video_index].update(clip.frame_indices)
        for video_index, indices in by_video.items():
            frames = self.decode(plan.videos[video_index], indices)
            for slot, clip in enumerate(view.clips):
                if clip.video_index == video_index:
                    batch[slot] = to_layout(self.clip_array(clip, frames), view.layout)
        fault_point("batch_assemble")
        self.count_independent(plan, view)

    def count_independent(self, plan: TaskPlan, view: ViewPlan) -> None:
        """What decoding each clip on its own would have cost (the baseline SAND saves against).
        Streams of one clip share its frames, so count each (video, sample) once."""
        seen: set[tuple[int, int]] = set()
        for clip in view.clips:
            if (clip.video_index, clip.sample) in seen:
                continue
            seen.add((clip.video_index, clip.sample))
            frames = plan.clip_frames(view.epoch, clip.video_index, clip.sample)
            info = plan.videos[clip.video_index]
            needed = frames_to_decode(info, sorted(set(frames)))
            self.stats.add("frames_decoded_independent", needed)

    def view_bytes(self, plan: TaskPlan, view: ViewPlan) -> bytearray:
        data, batch = npy_buffer(view.shape, view.dtype)
        self.fill_view(plan, view, batch)
        self.stats.add("views_materialized")
        return data

    def frame_bytes(self, info: VideoInfo, frame_index: int, ops: tuple = ()) -> bytes:
        """aug0 (no ops) or aug{D}: one decoded frame after the given planned ops."""
        frame = self.decode(info, {frame_index})[frame_index]
        if ops:
            frame = oplib.apply_chain(ops, [frame])[0]
        return npy_bytes(frame)


def to_layout(clip: np.ndarray, layout: str) -> np.ndarray:
    """A (T, H, W, C) clip in the view's layout."""
    return clip.transpose(3, 0, 1, 2) if layout == "NCTHW" else clip
