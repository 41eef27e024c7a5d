"""How long the kernel may keep a node's name, attributes and pages without asking again."""

from __future__ import annotations

from sandfs.fuse.namespace import Node

IMMUTABLE_TIMEOUT = 3600.0  # views never change once planned: let the kernel cache them
# status.json and metrics change all the time; which aug{D} exist follows the task's epoch;
# tasks come and go. Views stay immutable (a task registered again with the same config gets
# the same bytes).
MUTABLE_KINDS = frozenset({"status", "metrics", "frame", "aug", "sand", "tasks", "task_yaml",
                           "root", "task", "task_upload", "task_lease"})
# directories whose attributes never change while their inode lives (and a serving task's)
FIXED_ATTR_DIRS = frozenset({"sand", "tasks"})


def is_immutable(node: Node) -> bool:
    """May the kernel keep the node's name, attributes and pages?"""
    return node.kind not in MUTABLE_KINDS


def attr_timeout(node: Node, serving: bool) -> float:
    """Those of `.sand` and its `tasks` never change, nor those of a serving task's directory
    (`serving`: its owner's, for one registration: a task registered again is another inode):
    the kernel then checks a path's permissions without asking for them on every path walk.
    Their names come and go: they are looked up every time (`entry_timeout`), which a dead
    daemon answers ENOTCONN. `/` has no name to look up: its attributes cached, a stat of a
    dead daemon's mountpoint would answer, and a stale mount would pass for a live one."""
    if is_immutable(node) or node.kind in FIXED_ATTR_DIRS or (node.kind == "task" and serving):
        return IMMUTABLE_TIMEOUT
    return 0.0


def entry_timeout(node: Node) -> float:
    """A view's name is looked up on every open: that is how a shared inode knows which task's
    path was opened (`SandOperations.node_for`)."""
    return IMMUTABLE_TIMEOUT if is_immutable(node) and node.kind != "view" else 0.0
