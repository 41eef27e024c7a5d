"""`sched.objects.leaf_rows` as a walk of every video and use (a `ClipUse`'s batch key looked
up a use, readers tuples made a batch): the reference its column reads are checked against."""

from __future__ import annotations

import numpy as np

from sandfs.plan.cliptable import frame_count
from sandfs.plan.uses import ColumnUses
from sandfs.sched.objects import LeafRows, out_frame_nbytes


def walked_leaf_rows(plan) -> LeafRows:
    """The window's clips as columns, a use at a time, in the order of its videos' items."""
    views = {key: index for index, key in enumerate(plan.views)}
    first = np.array([min((p for _, p in plan.readers[key]), default=0) for key in views],
                     np.int64)
    frame_bytes = np.array([out_frame_nbytes(task_plan) for task_plan, _, _
                            in plan.views.values()], np.int64)
    paths, uses, rows = [], [], []
    for path, work in plan.videos.items():
        paths.append(path)
        uses.append(work.uses)
        if isinstance(work.uses, ColumnUses):
            rows.extend((views[r.view], s, frame_count(r.clips, s), len(paths) - 1)
                        for r, s in zip(*work.uses.columns, strict=True))
        else:
            rows.extend((views[u.view], u.slot, len(u.clip.frame_indices), len(paths) - 1)
                        for u in work.uses)
    view, slot, frames, video = np.array(rows, np.int64).reshape(len(rows), 4).T
    return LeafRows(paths, list(views), view, video, first[view], slot,
                    frame_bytes[view] * frames, uses)
