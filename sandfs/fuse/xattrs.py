"""The extended attributes a mount serves: `user.sand.meta`, `labels` and `state` on views,
frames and source videos, `user.sand.readers` on views, and `user.sand.classes` on a task's
directory."""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict

from sandfs.fuse.namespace import Node
from sandfs.media.types import VideoInfo
from sandfs.service import ViewService

XATTR_PREFIX = b"user.sand."
XATTRS = (b"user.sand.meta", b"user.sand.labels", b"user.sand.state")
VIEW_XATTRS = (*XATTRS, b"user.sand.readers")  # how many tasks read the view
TASK_XATTRS = (b"user.sand.classes",)  # on a task's directory: its sorted class names

ATTR_KINDS = ("view", "aug", "video_file")  # the nodes that carry XATTRS
PLANNED_ATTRS = ("meta", "labels")  # a view's attributes that its plan alone decides
PLANNED_VALUES_KEPT = 256  # views: a few batches ahead of each of many readers


def xattr_names(node: Node) -> list[bytes]:
    if node.kind == "task":
        return list(TASK_XATTRS)
    if node.kind == "view":
        return list(VIEW_XATTRS)
    return list(XATTRS) if node.kind in ATTR_KINDS else []


class PlannedValues:
    """The encoded `meta` and `labels` of the views asked last. They follow from the task's plan
    alone, and a reader asks twice a view: `os.getxattr` tries a 128-byte buffer first, and
    each try is a request that worked the whole value out again (9% of the event loop's GIL
    time serving SlowFast-size batches, docs/performance.md#the-gil-per-batch-served). Kept
    with a weak reference to the plan they came from: a task registered again under its name
    has a new one, and an ended task's plan is not held alive here."""

    def __init__(self, size: int = PLANNED_VALUES_KEPT) -> None:
        self.size = size
        self._kept: OrderedDict[tuple, tuple[weakref.ref, bytes]] = OrderedDict()

    def get(self, service: ViewService, node: Node, attr: str) -> bytes:
        plan = service.tasks[node.task]
        key = (node.task, node.epoch, node.iteration, attr)
        kept = self._kept.get(key)
        if kept is not None and kept[0]() is plan:
            self._kept.move_to_end(key)
            return kept[1]
        value = encoded(xattr_value(service, node, attr))
        self._kept[key] = (weakref.ref(plan), value)
        if len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return value


def xattr_bytes(service: ViewService, node: Node, name: bytes, exists: bool,
                planned: PlannedValues | None = None) -> bytes | None:
    """The value of attribute `name` on `node`, or None when it has none (`exists`: whether the
    node is still in the namespace); a view's planned values through `planned` if given."""
    if node.kind == "task":
        if name not in TASK_XATTRS or not exists:
            return None
        return json.dumps(service.tasks[node.task].class_names).encode()
    if name not in xattr_names(node):
        return None
    attr = name.removeprefix(XATTR_PREFIX).decode()
    if planned is not None and node.kind == "view" and attr in PLANNED_ATTRS:
        return planned.get(service, node, attr)
    return encoded(xattr_value(service, node, attr))


def encoded(value) -> bytes:
    return json.dumps(value).encode() if not isinstance(value, str) else value.encode()


def xattr_value(service: ViewService, node: Node, attr: str):
    """The value of `user.sand.ATTR` on a view, a frame (aug) or a source video: JSON-able,
    or a string."""
    if node.kind == "view":
        if attr == "state":
            return service.view_state(node.task, node.epoch, node.iteration)
        if attr == "readers":
            return str(service.view_readers(node.task, node.epoch, node.iteration))
        meta = service.view_meta(node.task, node.epoch, node.iteration)
        return meta if attr == "meta" else [s["label"] for s in meta["samples"]]
    plan = service.tasks[node.task]
    label = plan.labels[node.video]
    if attr == "labels":
        return [label]
    if attr == "state":
        return "ready"  # source files and single frames are served straight from the video
    meta = {"task": node.task, "video": plan.listed[node.video].name, "label": label,
            "label_index": plan.label_index(label)}
    info = plan.videos.known(node.video)  # probed: Namespace.prepared waited for it
    if not isinstance(info, VideoInfo):  # found bad: its bytes pass through, no frames
        return meta | {"bad": info.reason if info else None}
    meta |= {"rotation": info.rotation, "num_frames": info.num_frames, "width": info.width,
             "height": info.height, "codec": info.codec}
    if node.kind == "aug":
        fplan = service.frame_plan(node.task, node.video, node.frame, node.depth)
        meta |= {"frame_index": node.frame, "depth": node.depth,
                 "timestamp": info.timestamp_seconds(node.frame),
                 "epoch": service.positions[node.task][0],
                 "shape": list(fplan.shape) if fplan else None,
                 "dtype": fplan.dtype if fplan else None,
                 "ops": [o.name for o in fplan.ops] if fplan else []}
    return meta
