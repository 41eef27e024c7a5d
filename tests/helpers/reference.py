"""The reference oracle: a view computed the plain way — the pure plan, a full
sequential decode of each video (`decode_all_reference`), the ops, `np.save` — with no engine,
no cache, no selective decoding and no scheduler. Tests compare every served view against it.
"""

from __future__ import annotations

import io

import numpy as np

from sandfs import ops as oplib
from sandfs.media.decode import decode_all_reference
from sandfs.plan.task import TaskPlan


def reference_array(plan: TaskPlan, epoch: int, iteration: int) -> np.ndarray:
    view = plan.view_plan(epoch, iteration)
    decoded: dict[int, list[np.ndarray]] = {}
    clips = []
    for clip in view.clips:
        if clip.video_index not in decoded:
            size_hw, interpolation = clip.source or (None, "bilinear")
            decoded[clip.video_index] = decode_all_reference(
                plan.videos[clip.video_index].path, size_hw=size_hw, interpolation=interpolation)
        frames = [decoded[clip.video_index][i] for i in clip.frame_indices]
        array = np.stack(oplib.apply_chain(clip.ops, frames))
        clips.append(array.transpose(3, 0, 1, 2) if view.layout == "NCTHW" else array)
    return np.stack(clips).astype(view.dtype, copy=False)


def reference_view(plan: TaskPlan, epoch: int, iteration: int) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, reference_array(plan, epoch, iteration))
    return buffer.getvalue()
