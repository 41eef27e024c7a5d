"""The inode table of a mount: which inode number stands for which node(s) of the namespace."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pyfuse3

from sandfs.fuse.namespace import ROOT, Node


class Inodes:
    """Stable inode numbers for the life of the mount: one per object (`identity`). An object
    reached by several paths (a view that several tasks share) is one inode with one node per
    path, its aliases: the kernel then keeps one copy of it in its page cache."""

    def __init__(self, identity: Callable[[Node], object]) -> None:
        self.identity = identity
        self._by_node: dict[Node, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._by_identity: dict[object, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._aliases: dict[int, list[Node]] = {pyfuse3.ROOT_INODE: [ROOT]}

    def inode(self, node: Node) -> int:
        found = self._by_node.get(node)
        if found is None:
            key = self.identity(node)
            found = self._by_identity.get(key)
            if found is None:
                found = len(self._aliases) + pyfuse3.ROOT_INODE
                self._by_identity[key] = found
                self._aliases[found] = []
            self._by_node[node] = found
            self._aliases[found].append(node)
        return found

    def aliases(self, inode: int) -> list[Node]:
        nodes = self._aliases.get(inode)
        if nodes is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return nodes

    def node(self, inode: int) -> Node:
        return self.aliases(inode)[0]
