"""The inode table of a mount: which inode number stands for which node(s) of the namespace,
for as long as the kernel holds the inode."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pyfuse3

from sandfs.fuse.namespace import ROOT, Node


class Inodes:
    """One inode number per object (`identity`). An object reached by several paths (a view
    that several tasks share) is one inode with one node per path, its aliases: the kernel then
    keeps one copy of it in its page cache.

    Every node can be derived again from its parent and name, so an entry lives only while the
    kernel holds its inode: each reply that hands the kernel an inode (lookup, a readdirplus
    entry, create) counts one lookup, FUSE `forget` takes them back, and at zero the entry goes.
    Memory then follows what the kernel caches, not how many names were ever listed. A name
    looked up again after that gets a new number (never one used before): the kernel holds
    nothing of the old one, no attributes and no cached pages."""

    def __init__(self, identity: Callable[[Node], object]) -> None:
        self.identity = identity
        self._by_node: dict[Node, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._by_identity: dict[object, int] = {ROOT: pyfuse3.ROOT_INODE}
        self._identities: dict[int, object] = {pyfuse3.ROOT_INODE: ROOT}
        self._aliases: dict[int, list[Node]] = {pyfuse3.ROOT_INODE: [ROOT]}
        self._lookups: dict[int, int] = {}  # inode -> lookups the kernel has not forgotten
        self._next = pyfuse3.ROOT_INODE + 1

    def __len__(self) -> int:
        """Inodes known, the root included."""
        return len(self._aliases)

    def inode(self, node: Node) -> int:
        found = self._by_node.get(node)
        if found is None:
            key = self.identity(node)
            found = self._by_identity.get(key)
            if found is None:
                found = self._next
                self._next += 1
                self._by_identity[key] = found
                self._identities[found] = key
                self._aliases[found] = []
            self._by_node[node] = found
            self._aliases[found].append(node)
        return found

    def held(self, inode: int) -> None:
        """The kernel was just handed `inode` (it counts one lookup of it)."""
        self._lookups[inode] = self._lookups.get(inode, 0) + 1

    def forget(self, inode: int, count: int) -> None:
        """The kernel dropped `count` lookups of `inode`: at none left, the entry goes."""
        left = self._lookups.pop(inode, 0) - count
        if left > 0:
            self._lookups[inode] = left
        else:
            self._drop(inode)

    def drop_unheld(self, inode: int) -> None:
        """An inode numbered for a reply that never reached the kernel (a full readdir page)."""
        if inode not in self._lookups:
            self._drop(inode)

    def _drop(self, inode: int) -> None:
        if inode == pyfuse3.ROOT_INODE:
            return
        for node in self._aliases.pop(inode, ()):
            del self._by_node[node]
        key = self._identities.pop(inode, None)
        if key is not None:
            del self._by_identity[key]

    def aliases(self, inode: int) -> list[Node]:
        nodes = self._aliases.get(inode)
        if nodes is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return nodes

    def node(self, inode: int) -> Node:
        return self.aliases(inode)[0]
