"""Object graph pruning (SAND §5.3, Algorithm 1): which objects to keep on disk under a budget.

Pure code over one `ObjectGraph` per video: each node's stored size, the nodes it is made from and
the seconds of the op that makes it (`ObjectGraph.from_networkx` reads a networkx DiGraph with
node attribute `nbytes` and edge attribute `cost_seconds`). The root (the one node without
parents) is the video: never cached, always readable. The leaves are what training reads (clips
or batches); a node with several parents (a clip of many frames) needs all of them.

Model. Given a cached set C, a node is *covered* when it can be made without the video: it is
cached, or it is not the root and all its parents are covered. The recompute cost of C is the
sum, over the nodes that must be made (not cached, and a leaf or the parent of one that must be
made), of their make seconds. Caching every leaf costs nothing: the starting point.

Steps, bottom-up as in the paper:
1. Collapse. For a cached node X not made straight from the video, cache its uncovered parents
   (or the uncovered ancestors 2, 3, ... levels up: a clip and its aug frames often have the same
   size, the frame under several aug frames is smaller) instead: X and every other cached node
   this covers are dropped (they can be remade from the cache). Among collapses with a net
   space saving, take the one with the least added recompute seconds per byte saved (the paper
   ranks by subtree edge weight and states this goal: "space savings per unit of added
   recomputation"), across all the videos' graphs.
2. Drop. When no collapse saves space and it still exceeds the budget, uncache objects (remade
   from the video or what remains cached) by least added seconds per byte.

Neither step's choice depends on the budget, every step frees bytes, and no step lowers the
recompute cost (a collapse caches only uncovered nodes, which nothing needed to make). So the
result fits any budget >= 0, and a larger budget stops earlier on the same path: never more
recompute. Deterministic: ties go by graph order, then node order.

A step changes its own video's graph only. So each video's walk runs alone, to its end, and the
global order is a merge of the videos' walks by the rank of each one's next step: the same steps
in the same order as one walk over every graph at once, with one video's graph in memory at a
time (10,000 short videos: 0.5 GB and 9 s as networkx graphs walked together).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used (0.06 s): tests and callers that build graphs with it
    import networkx as nx


@dataclass(frozen=True, slots=True)
class ObjectGraph:
    """One video's objects, by position: what each is called, made from, its size and the
    seconds to make it from its parents. The one node without parents is the video."""

    names: tuple[Hashable, ...]
    parents: tuple[tuple[int, ...], ...]
    nbytes: tuple[int, ...]  # the root's is ignored
    make_seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        count = len(self.names)
        if not len(self.parents) == len(self.nbytes) == len(self.make_seconds) == count:
            raise ValueError("an object graph needs names, parents, nbytes and make_seconds "
                             "for every node")
        roots = [i for i, parents in enumerate(self.parents) if not parents]
        if len(roots) != 1:
            raise ValueError(f"an object graph needs exactly 1 root (the video), found "
                             f"{len(roots)}")
        for i, name in enumerate(self.names):
            if not all(0 <= p < count and p != i for p in self.parents[i]):
                raise ValueError(f"node {name!r}: parents must be other nodes, got "
                                 f"{self.parents[i]!r}")
            nbytes, seconds = self.nbytes[i], self.make_seconds[i]
            if i != roots[0] and (nbytes is None or nbytes < 0):
                raise ValueError(f"node {name!r}: nbytes must be >= 0, got {nbytes!r}")
            if seconds is None or not seconds >= 0:
                raise ValueError(f"node {name!r}: make_seconds must be >= 0, got {seconds!r}")

    @property
    def root(self) -> int:
        return next(i for i, parents in enumerate(self.parents) if not parents)

    @classmethod
    def from_networkx(cls, graph: nx.DiGraph) -> ObjectGraph:
        """Node attribute `nbytes` (the root needs none), edge attribute `cost_seconds`."""
        roots = [n for n in graph.nodes if graph.in_degree(n) == 0]
        if len(roots) != 1:
            raise ValueError(f"an object graph needs exactly 1 root (the video), found "
                             f"{len(roots)}")
        for parent, child, seconds in graph.edges(data="cost_seconds"):
            if seconds is None or not seconds >= 0:
                raise ValueError(f"edge {parent!r} -> {child!r}: cost_seconds must be >= 0, "
                                 f"got {seconds!r}")
        names = tuple(graph.nodes)
        position = {name: i for i, name in enumerate(names)}
        return cls(names,
                   tuple(tuple(position[p] for p in graph.predecessors(n)) for n in names),
                   tuple(0 if n == roots[0] else nbytes
                         for n, nbytes in graph.nodes(data="nbytes")),
                   tuple(float(sum(graph.edges[p, n]["cost_seconds"]
                                   for p in graph.predecessors(n))) for n in names))


@dataclass(frozen=True, slots=True)
class PrunePlan:
    cached: tuple[frozenset[Hashable], ...]  # per input graph, the nodes to keep on disk
    total_nbytes: int
    added_recompute_seconds: float  # over caching every leaf
    collapses: int
    drops: int


@dataclass(frozen=True, slots=True)
class _Step:
    rank: tuple[float, int]  # (seconds per byte saved, -bytes saved): least first
    saved_nbytes: int
    added_seconds: float
    cache: tuple[int, ...]  # nodes to cache
    uncache: tuple[int, ...]  # nodes to drop
    newly_covered: tuple[int, ...]
    newly_needed: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Taken:
    """A step of one video's walk, by name: what the merge weighs and applies."""

    order: tuple[tuple[float, int], int]  # (rank, node): the walk's own order
    saved_nbytes: int
    added_seconds: float
    cache: tuple[Hashable, ...]
    uncache: tuple[Hashable, ...]


class _Video:
    """One video's graph as integer-indexed lists, and the state of the greedy walk."""

    def __init__(self, graph: ObjectGraph) -> None:
        self.names = graph.names
        self.parents = graph.parents
        children: list[list[int]] = [[] for _ in graph.names]
        for node, parents in enumerate(graph.parents):
            for parent in parents:
                children[parent].append(node)
        self.children = [tuple(c) for c in children]
        self.root = graph.root
        self.nbytes = [0 if i == self.root else int(n) for i, n in enumerate(graph.nbytes)]
        self.make_seconds = graph.make_seconds
        self.topo = _topological_positions(graph.parents, self.children)
        self.cached = {i for i, children in enumerate(self.children)
                       if not children and i != self.root}
        self.covered = [i in self.cached for i in range(len(self.names))]
        self.uncovered_parents = [sum(not self.covered[p] for p in parents)
                                  for parents in graph.parents]
        self.needed = [False] * len(self.names)

    def leaves(self) -> tuple[Hashable, ...]:
        return tuple(self.names[i] for i in sorted(self.cached))

    def cached_nbytes(self) -> int:
        return sum(self.nbytes[i] for i in self.cached)

    def collapse(self, x: int) -> _Step | None:
        """The best way to replace X by uncovered ancestors 1, 2, ... levels up (an aug frame
        alone may save nothing over its clip, the frame under both may save much), each also
        widened once to the parents of the cached nodes it covers only in part (two clips
        sharing an aug frame collapse together): cache them, drop every cached node this
        covers."""
        steps = []
        for cache in self._frontiers(x):
            step = self._evaluate(cache)
            steps.append(step)
            widened = self._widen(cache, step.newly_covered, step.uncache)
            if widened != cache:
                steps.append(self._evaluate(widened))
        steps = [step for step in steps if step.saved_nbytes > 0]
        return min(steps, key=lambda step: step.rank, default=None)

    def _evaluate(self, cache: tuple[int, ...]) -> _Step:
        newly_covered, uncache = self._cover(cache)
        saved = sum(self.nbytes[i] for i in uncache) - sum(self.nbytes[i] for i in cache)
        newly_needed = self._needs(uncache, (self.cached | set(cache)) - set(uncache))
        return self._step(saved, cache, uncache, newly_covered, newly_needed)

    def _widen(self, cache: tuple[int, ...], newly_covered: tuple[int, ...],
               uncache: tuple[int, ...]) -> tuple[int, ...]:
        covered = set(newly_covered)
        partial = {child for node in newly_covered for child in self.children[node]
                   if child in self.cached and child not in uncache
                   and self.root not in self.parents[child]}
        extra = {p for child in partial for p in self.parents[child]
                 if not self.covered[p] and p not in covered}
        return tuple(sorted(set(cache) | extra))

    def _frontiers(self, x: int) -> list[tuple[int, ...]]:
        """X's uncovered ancestors one level up, two levels up, ...: a node made straight from
        the video stays as it is (only caching it covers it)."""
        if self.root in self.parents[x]:
            return []
        frontiers: list[tuple[int, ...]] = []
        frontier = (x,)
        while True:
            lifted = set()
            for node in frontier:
                if self.root in self.parents[node]:
                    lifted.add(node)
                else:
                    lifted.update(p for p in self.parents[node] if not self.covered[p])
            if tuple(sorted(lifted)) == frontier:
                return frontiers
            frontier = tuple(sorted(lifted))
            frontiers.append(frontier)

    def drop(self, x: int) -> _Step | None:
        """Uncache X: it is remade from what stays cached, or from the video."""
        if self.nbytes[x] <= 0:
            return None
        newly_needed = self._needs((x,), self.cached - {x})
        return self._step(self.nbytes[x], (), (x,), (), newly_needed)

    def apply(self, step: _Step) -> None:
        # drops come after every collapse, so they need not keep `covered` up to date
        self.cached.difference_update(step.uncache)
        self.cached.update(step.cache)
        for i in step.newly_covered:
            if not self.covered[i]:
                self.covered[i] = True
                for child in self.children[i]:
                    self.uncovered_parents[child] -= 1
        for i in step.newly_needed:
            self.needed[i] = True

    def affected_by(self, step: _Step) -> set[int]:
        """Cached nodes whose steps may have changed: those with a parent that is, or is an
        ancestor of, a changed node, and cached nodes a changed node is made from or feeds."""
        changed = {*step.cache, *step.uncache, *step.newly_covered, *step.newly_needed}
        seen, stack = set(), list(changed)
        while stack:
            node = stack.pop()
            if node in seen or node == self.root:
                continue
            seen.add(node)
            stack.extend(self.parents[node])
        affected = {c for node in seen for c in self.children[node] if c in self.cached}
        affected |= {p for node in changed for p in self.parents[node] if p in self.cached}
        return affected | self._cached_below(changed)

    def _step(self, saved: int, cache: tuple[int, ...], uncache: tuple[int, ...],
              newly_covered: tuple[int, ...], newly_needed: tuple[int, ...]) -> _Step:
        added = sum(self.make_seconds[i] for i in newly_needed)
        seconds_per_byte = added / saved if saved > 0 else math.inf  # no saving: never taken
        return _Step((seconds_per_byte, -saved), saved, added, cache, uncache, newly_covered,
                     newly_needed)

    def _cover(self, cache: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Caching `cache` covers more nodes: (the nodes it newly covers, the cached nodes that
        become covered by their parents and so may be dropped)."""
        covered, uncache = set(cache), set()
        missing: dict[int, int] = {}  # uncovered parents left, of the children reached
        stack = list(cache)
        while stack:
            for child in self.children[stack.pop()]:  # one parent of it newly covered
                if child in covered or child in uncache:
                    continue
                missing[child] = missing.get(child, self.uncovered_parents[child]) - 1
                if missing[child] == 0:
                    if child in self.cached:
                        uncache.add(child)  # already covered: its children gain nothing
                    else:
                        covered.add(child)
                        stack.append(child)
        return tuple(sorted(covered)), tuple(sorted(uncache))

    def _needs(self, uncached: Iterable[int], kept: set[int]) -> tuple[int, ...]:
        """Nodes that must now be made, once `uncached` are no longer cached and `kept` are."""
        newly: set[int] = set()
        for node in sorted(uncached, key=self.topo.__getitem__, reverse=True):
            children = self.children[node]
            if not children or any(c not in kept and (self.needed[c] or c in newly)
                                   for c in children):
                stack = [node]
                while stack:
                    n = stack.pop()
                    if n == self.root or n in kept or n in newly or self.needed[n]:
                        continue
                    newly.add(n)
                    stack.extend(self.parents[n])
        return tuple(sorted(newly))

    def _cached_below(self, nodes: Iterable[int]) -> set[int]:
        found, seen, stack = set(), set(), list(nodes)
        while stack:
            node = stack.pop()
            for child in self.children[node]:
                if child in self.cached:
                    found.add(child)
                elif child not in seen:
                    seen.add(child)
                    stack.append(child)
        return found


def _topological_positions(parents: Sequence[tuple[int, ...]],
                           children: Sequence[tuple[int, ...]]) -> list[int]:
    """Each node's place in a topological order (parents first); a cycle is an error."""
    waiting = [len(p) for p in parents]
    ready = [i for i, count in enumerate(waiting) if count == 0]
    position = [-1] * len(parents)
    for place in range(len(parents)):
        if not ready:
            raise ValueError("the object graph has a cycle")
        node = ready.pop()
        position[node] = place
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return position


def _walk(video: _Video, kind: str) -> list[_Taken]:
    """One video's steps of one kind ("collapse" or "drop"), best first, until none saves
    space. A heap item is (rank, node); an item whose step changed since is pushed again."""
    heap: list[tuple[tuple[float, int], int]] = []

    def push(nodes: Iterable[int]) -> None:
        for node in nodes:
            step = getattr(video, kind)(node)
            if step is not None:
                heapq.heappush(heap, (step.rank, node))

    push(sorted(video.cached))
    taken = []
    while heap:
        rank, node = heapq.heappop(heap)
        step = getattr(video, kind)(node) if node in video.cached else None
        if step is None:
            continue
        if step.rank != rank:
            heapq.heappush(heap, (step.rank, node))
            continue
        video.apply(step)
        names = video.names
        taken.append(_Taken((rank, node), step.saved_nbytes, step.added_seconds,
                            tuple(names[i] for i in step.cache),
                            tuple(names[i] for i in step.uncache)))
        push(sorted(video.affected_by(step)))
    return taken


def _merge(walks: Sequence[list[_Taken]], total_nbytes: int, budget_bytes: int
           ) -> tuple[int, float, list[int]]:
    """Takes the videos' steps, the least ranked next step first, until the total fits: the
    bytes left, the seconds added, and how many steps of each walk were taken."""
    heap = [(walk[0].order[0], index, walk[0].order[1], 0)
            for index, walk in enumerate(walks) if walk]
    heapq.heapify(heap)
    taken = [0] * len(walks)
    added_seconds = 0.0
    while total_nbytes > budget_bytes and heap:
        _, index, _, step_index = heapq.heappop(heap)
        step = walks[index][step_index]
        total_nbytes -= step.saved_nbytes
        added_seconds += step.added_seconds
        taken[index] = step_index + 1
        if step_index + 1 < len(walks[index]):
            rank, node = walks[index][step_index + 1].order
            heapq.heappush(heap, (rank, index, node, step_index + 1))
    return total_nbytes, added_seconds, taken


def _applied(cached: set[Hashable], steps: Iterable[_Taken]) -> set[Hashable]:
    for step in steps:
        cached.difference_update(step.uncache)
        cached.update(step.cache)
    return cached


def prune(graphs: Sequence[ObjectGraph], budget_bytes: int) -> PrunePlan:
    """The objects to keep under `budget_bytes`, starting from every leaf cached. Each graph is
    read once (twice when collapses do not suffice and drops follow): a sequence that builds
    each when asked keeps one video's graph in memory at a time."""
    if budget_bytes < 0:
        raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
    leaves, collapses, total_nbytes = [], [], 0
    for graph in graphs:
        video = _Video(graph)
        leaves.append(video.leaves())
        total_nbytes += video.cached_nbytes()
        collapses.append(_walk(video, "collapse"))
    total_nbytes, collapse_seconds, took = _merge(collapses, total_nbytes, budget_bytes)
    drops: list[list[_Taken]] = [[] for _ in leaves]
    if total_nbytes > budget_bytes:  # every collapse taken: the walks go on from their ends
        for index, graph in enumerate(graphs):
            video = _Video(graph)
            _walk(video, "collapse")
            drops[index] = _walk(video, "drop")
    total_nbytes, drop_seconds, dropped = _merge(drops, total_nbytes, budget_bytes)
    cached = tuple(frozenset(_applied(set(leaves[i]), collapses[i][:took[i]]
                                      + drops[i][:dropped[i]])) for i in range(len(leaves)))
    return PrunePlan(cached, total_nbytes, collapse_seconds + drop_seconds, sum(took),
                     sum(dropped))


def recompute_seconds(graph: nx.DiGraph, cached: Iterable[Hashable]) -> float:
    """Seconds of ops needed to make every leaf once when `cached` are on disk (a reference
    for tests and reports: independent of the greedy's bookkeeping)."""
    import networkx as nx

    cached = set(cached)
    needed: set[Hashable] = set()
    for node in reversed(list(nx.topological_sort(graph))):
        children = list(graph.successors(node))
        is_root = graph.in_degree(node) == 0
        if node not in cached and not is_root and (
                not children or any(c in needed for c in children)):
            needed.add(node)
    return sum(float(graph.edges[p, n]["cost_seconds"]) for n in needed
               for p in graph.predecessors(n))
