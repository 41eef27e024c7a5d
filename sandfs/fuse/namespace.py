"""The mounted tree (docs/contract.md) as pure code: nodes, strict name parsing, children, sizes,
owners and modes, and which nodes are one object.

Every path has exactly one node: numbers parse strictly (`0`, `17`; never `01`, `+1`, ` 1`,
`1_0` or non-ASCII digits), so no two spellings of a path reach one node. Names outside the
plan resolve to None (ENOENT) without planning or materializing anything.

Before the datasets are scanned there is no service yet: only the root, `.sand` and its files
answer, and the directories of the tasks the mount's configs name, from the names and owners
the configs give (`needs_tasks` says which requests must wait for the tasks).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import chain

import trio

from sandfs.access import NodeAccess, Owner, privileged
from sandfs.media.probebook import ProbeLost
from sandfs.media.scan_workers import ScanStopped
from sandfs.media.types import VideoInfo
from sandfs.metrics import render_metrics
from sandfs.service import ViewService
from sandfs.startup import NotServing, Startup, as_startup
from sandfs.tasks import MOUNT_GENERATION

_NUMBER = re.compile(r"(0|[1-9][0-9]{0,8})\Z", re.ASCII)


def parse_number(text: str, prefix: str = "") -> int | None:
    if not text.startswith(prefix):
        return None
    digits = text[len(prefix) :]
    return int(digits) if _NUMBER.match(digits) else None


@dataclass(frozen=True, slots=True)
class Node:
    """A path in the tree. `kind` says what it is; the other fields locate it in the plan."""

    kind: str
    task: str = ""
    epoch: int = -1
    iteration: int = -1
    folder: str = ""  # for videos/ folders: the dataset-relative folder ("" = videos/ itself)
    video: int = -1  # index into the task plan's videos
    frame: int = -1
    depth: int = -1
    generation: int = 0  # of the task's registration: a task registered again gets new inodes

    @property
    def is_dir(self) -> bool:
        return self.kind in DIR_KINDS


DIR_KINDS = {"root", "sand", "tasks", "task", "epoch", "iteration", "videos", "frames", "frame"}
ROOT = Node("root")
SAND_DIR = ".sand"
STATUS = "status.json"
METRICS = "metrics"  # the status in the Prometheus text format
LEASE_SUFFIX = ".lease"  # .sand/tasks/NAME.lease: open while the task must live (not listed)
META_FILE = "meta.json"  # ITERATION/meta.json: user.sand.meta, also past the xattr size limit


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who lists a directory: `/` and `.sand/tasks/` show each user the tasks they may read."""

    uid: int
    gid: int


class VideoTree:
    """The folders of one task's `videos/` directory, built once from its video names."""

    def __init__(self, names: list[tuple[str, str]]) -> None:
        # names: (VIDEO name, file extension as on disk), in video-index order
        self.entries: dict[str, dict[str, tuple[str, int]]] = {"": {}}
        for index, (name, ext) in enumerate(names):
            folder, _, leaf = name.rpartition("/")
            self._add_folder(folder)
            self.entries[folder][leaf + ext] = ("video_file", index)
            self.entries[folder][leaf] = ("frames", index)

    def _add_folder(self, folder: str) -> None:
        if folder in self.entries:
            return
        self.entries[folder] = {}
        parent, _, leaf = folder.rpartition("/")
        self._add_folder(parent)
        self.entries[parent][leaf] = ("folder", -1)


class Namespace:
    def __init__(self, service: ViewService | Startup) -> None:
        self.startup = as_startup(service)
        self._video_trees: dict[str, tuple[object, VideoTree]] = {}  # task -> (plan, tree)
        self.daemon = (os.geteuid(), os.getegid())

    @property
    def service(self) -> ViewService:
        """The tasks' service; the FUSE layer asks for it once `needs_tasks` was waited for."""
        service = self.startup.service
        if service is None:
            raise NotServing("the tasks are not planned yet")
        return service

    def needs_tasks(self, directory: Node, name: str | None = None) -> bool:
        """Whether looking up `name` in `directory` (None: listing it) needs the tasks. Before
        the datasets are scanned only `.sand`, its fixed names and the configs' task names in
        `/` are known."""
        if directory.kind == "root":
            return name != SAND_DIR and name not in self.startup.tasks
        return directory.kind != "sand"

    def generation(self, task: str) -> int | None:
        """The registration of `task` serving now; None: no such task. Until the service is
        there, a mount config's, whose first registration it will be."""
        if not self.startup.ready:
            return MOUNT_GENERATION if task in self.startup.tasks else None
        service = self.service
        return service.generations[task] if task in service.tasks else None

    def owner(self, task: str) -> Owner | None:
        if not self.startup.ready:
            return self.startup.tasks.get(task)
        return self.service.registry.owners.get(task)

    def video_tree(self, task: str) -> VideoTree:
        plan = self.service.tasks[task]
        built = self._video_trees.get(task)
        if built is None or built[0] is not plan:  # new, or a task re-registered under the name
            built = (plan, VideoTree([(v.name, ext_of(v.rel_path)) for v in plan.listed]))
            self._video_trees[task] = built
        return built[1]

    def identity(self, node: Node) -> object:
        """What one object is: its node, except for views. Tasks with the same
        `TaskPlan.sharing_key` have the same batches: one object, reached through each task's
        path — when the tasks also have the same owner and modes, since the kernel keeps one
        owner and mode per inode. (Not `view_key` itself: it would freeze the window's shared
        draws on a mere stat.)"""
        if node.kind != "view":
            return node
        plan = self.service.tasks[node.task]
        return ("view", plan.sharing_key, node.epoch, node.iteration, self.access(node))

    def exists(self, node: Node) -> bool:
        """False for the nodes of a task that has ended (or was registered anew since)."""
        if not node.task or node.kind == "task_upload":
            return True
        return self.generation(node.task) == node.generation

    def access(self, node: Node) -> NodeAccess:
        """Owner and permission bits. A task's tree (its YAML included) is its owner's, with
        the task's modes: the kernel's default_permissions check keeps everyone else out of
        it, whatever inode serves it. Anyone may register a task in the sticky `.sand/tasks/`
        of a root daemon, and remove only their own."""
        uid, gid = self.daemon
        if node.task and node.kind != "task_upload":
            owner = self.owner(node.task)
            if owner is None or not self.exists(node):
                return NodeAccess(uid, gid, 0)
            mode = owner.dir_mode if node.is_dir else owner.file_mode
            # its YAML, and its lease (whose last close ends the task), are the owner's alone
            private = node.kind in ("task_yaml", "task_lease")
            return NodeAccess(owner.uid, owner.gid, 0o600 if private else mode)
        if node.kind == "tasks":
            return NodeAccess(uid, gid, 0o1777 if uid == 0 else 0o755)
        return NodeAccess(uid, gid, 0o555 if node.is_dir else 0o444)

    def may_see(self, task: str, kind: str, viewer: Viewer | None) -> bool:
        """May `viewer` read the task's directory (or YAML)? Its name is listed only then."""
        if viewer is None or privileged(viewer.uid):
            return True
        generation = self.generation(task)
        if generation is None:
            return False
        access = self.access(Node(kind, task=task, generation=generation))
        if access.uid == viewer.uid:
            return True
        return bool(access.mode & (0o040 if access.gid == viewer.gid else 0o004))

    def task_path(self, node: Node) -> str:
        """Where a view, frame or source file is in its task's tree (for status.json)."""
        if node.kind in ("view", "meta"):
            leaf = "view" if node.kind == "view" else META_FILE
            return f"{node.epoch}/{node.iteration}/{leaf}"
        video = self.service.tasks[node.task].listed[node.video]
        if node.kind == "video_file":
            return f"videos/{video.rel_path}"
        return f"videos/{video.name}/frame{node.frame}/aug{node.depth}"

    async def prepared(self, node: Node) -> Node:
        """`node`, once what the synchronous calls on it read is planned, off the event loop:
        which aug{D} a frame directory holds, and their sizes. Await it right before them."""
        plans = node.kind == "frame" or (node.kind == "aug" and node.depth > 0)
        if node.video >= 0 and self.exists(node):
            videos = self.service.tasks[node.task].videos
            if videos.known(node.video) is None:  # a lazy scan's, not probed yet
                with contextlib.suppress(ScanStopped, ProbeLost):  # stopping: no frames
                    await trio.to_thread.run_sync(videos.usable, node.video,
                                                  abandon_on_cancel=True)
        if plans and self.exists(node) and self.probed(node) is not None:
            await self.service.plan_frames(node.task, node.video)
        return node

    def probed(self, node: Node) -> VideoInfo | None:
        """The node's video as probed (`prepared` waits for it); None when found bad: its
        source file passes through, it has no frames (docs/contract.md#lazy-scan)."""
        found = self.service.tasks[node.task].videos.known(node.video)
        return found if isinstance(found, VideoInfo) else None

    # -- lookup ------------------------------------------------------------------------------

    def child(self, parent: Node, name: str) -> Node | None:
        handler = getattr(self, f"_child_{parent.kind}", None)
        if handler is None or not self.exists(parent):
            return None
        return handler(parent, name)

    def _child_root(self, _: Node, name: str) -> Node | None:
        if name == SAND_DIR:
            return Node("sand")
        generation = self.generation(name)
        return None if generation is None else Node("task", task=name, generation=generation)

    def _child_sand(self, _: Node, name: str) -> Node | None:
        return {STATUS: Node("status"), METRICS: Node("metrics"),
                "tasks": Node("tasks")}.get(name)

    def _child_tasks(self, _: Node, name: str) -> Node | None:
        task = name.removesuffix(".yaml")
        if name.endswith(".yaml") and task in self.service.task_texts:
            return Node("task_yaml", task=task, generation=self.service.generations[task])
        lease = name.removesuffix(LEASE_SUFFIX)
        if name.endswith(LEASE_SUFFIX) and lease in self.service.tasks:
            return Node("task_lease", task=lease, generation=self.service.generations[lease])
        return None

    def _child_task(self, parent: Node, name: str) -> Node | None:
        if name == "videos":
            return replace(parent, kind="videos")
        epoch = parse_number(name)
        plan = self.service.tasks[parent.task]
        if epoch is None or epoch >= plan.epochs:
            return None
        return replace(parent, kind="epoch", epoch=epoch)

    def _child_epoch(self, parent: Node, name: str) -> Node | None:
        iteration = parse_number(name)
        plan = self.service.tasks[parent.task]
        if iteration is None or iteration >= plan.iterations_per_epoch:
            return None
        return replace(parent, kind="iteration", iteration=iteration)

    def _child_iteration(self, parent: Node, name: str) -> Node | None:
        kind = {"view": "view", META_FILE: "meta"}.get(name)
        return None if kind is None else replace(parent, kind=kind)

    def _child_videos(self, parent: Node, name: str) -> Node | None:
        entry = self.video_tree(parent.task).entries.get(parent.folder, {}).get(name)
        if entry is None:
            return None
        kind, index = entry
        if kind == "folder":
            folder = f"{parent.folder}/{name}" if parent.folder else name
            return replace(parent, folder=folder)
        return replace(parent, kind=kind, video=index)

    def _child_frames(self, parent: Node, name: str) -> Node | None:
        frame = parse_number(name, "frame")
        info = self.probed(parent)
        if frame is None or info is None or frame >= info.num_frames:
            return None
        return replace(parent, kind="frame", frame=frame)

    def _child_frame(self, parent: Node, name: str) -> Node | None:
        depth = parse_number(name, "aug")
        if depth is None:
            return None
        if self.service.frame_plan(parent.task, parent.video, parent.frame, depth) is None:
            return None
        return replace(parent, kind="aug", depth=depth)

    # -- listing -----------------------------------------------------------------------------

    def children(self, node: Node, start: int = 0, viewer: Viewer | None = None
                 ) -> Iterator[tuple[int, str, Node]]:
        """The entries of a directory from offset `start`, in a stable order: (offset of the
        next entry, name, node). Made as the kernel pages through the directory, so a page
        costs what it returns, however many epochs a task has. `viewer` (None: all) sees in
        `/` and `.sand/tasks/` only what they may read."""
        for position, name in enumerate(self.child_names(node, start, viewer), start + 1):
            child = self.child(node, name)
            if child is not None:
                yield position, name, child

    def child_names(self, node: Node, start: int = 0, viewer: Viewer | None = None
                    ) -> Iterable[str]:
        """The names of a directory's entries from offset `start`."""
        if not self.exists(node):
            return ()
        match node.kind:
            case "task":  # `videos`, then one entry per epoch
                epochs = range(max(start - 1, 0), self.service.tasks[node.task].epochs)
                return chain(["videos"][start:], map(str, epochs))
            case "epoch":
                plan = self.service.tasks[node.task]
                return map(str, range(start, plan.iterations_per_epoch))
            case "frames":
                info = self.probed(node)
                return (f"frame{i}" for i in range(start, info.num_frames if info else 0))
        return self._small_listing(node, viewer)[start:]

    def _small_listing(self, node: Node, viewer: Viewer | None = None) -> list[str]:
        match node.kind:
            case "sand":  # known before the tasks are
                return [STATUS, METRICS, "tasks"]
            case "root":
                return [SAND_DIR, *sorted(t for t in self.service.tasks
                                          if self.may_see(t, "task", viewer))]
            case "tasks":
                return [f"{t}.yaml" for t in sorted(self.service.task_texts)
                        if self.may_see(t, "task_yaml", viewer)]
            case "iteration":
                return ["view", META_FILE]
            case "videos":
                return list(self.video_tree(node.task).entries.get(node.folder, {}))
            case "frame":
                deepest = self.service.max_depth(node.task, node.video, node.frame)
                return [f"aug{d}" for d in range(deepest + 1)]
        return []

    # -- sizes -------------------------------------------------------------------------------

    def file_size(self, node: Node) -> int:
        if not self.exists(node):
            return 0
        match node.kind:
            case "status":  # answers before the tasks are known
                return len(self.startup.status_bytes())
            case "metrics":
                return len(render_metrics(self.startup.status_record()))
        return self._task_file_size(node, self.service) if node.task else 0

    @staticmethod
    def _task_file_size(node: Node, service: ViewService) -> int:
        match node.kind:
            case "view":
                return service.tasks[node.task].view_nbytes(node.epoch, node.iteration)
            case "video_file":
                return service.tasks[node.task].listed[node.video].size_bytes
            case "aug":
                fplan = service.frame_plan(node.task, node.video, node.frame, node.depth)
                return fplan.nbytes if fplan else 0
            case "task_yaml":
                return len(service.task_texts[node.task].encode())
            case "meta":
                return len(meta_bytes(service, node))
        return 0


def ext_of(rel_path: str) -> str:
    leaf = rel_path.rsplit("/", 1)[-1]
    dot = leaf.rfind(".")
    return leaf[dot:] if dot > 0 else ""


def meta_bytes(service: ViewService, node: Node) -> bytes:
    """ITERATION/meta.json: the view's `user.sand.meta`, which a large batch makes longer than
    the kernel lets an xattr be (64 KiB)."""
    return json.dumps(service.view_meta(node.task, node.epoch, node.iteration)).encode()
