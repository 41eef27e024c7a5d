"""Algorithm 1 (object graph pruning): hand-made graphs with known answers, and properties over
random graphs: the budget holds, a larger budget never costs more recompute, determinism."""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandfs.cache.prune import ObjectGraph, PrunePlan, recompute_seconds
from sandfs.cache.prune import prune as prune_graphs


def prune(graphs: Sequence, budget_bytes: int) -> PrunePlan:
    if not isinstance(graphs, CountingGraphs):
        graphs = [ObjectGraph.from_networkx(graph) for graph in graphs]
    return prune_graphs(graphs, budget_bytes)


def video_graph(name: str, frames: dict[str, int], edges: list[tuple[str, str, float]],
                nbytes: dict[str, int]) -> nx.DiGraph:
    """A graph rooted at `name`: frames decoded from it (decode seconds as values), then the
    given edges (parent, child, cost_seconds); `nbytes` for every non-root node."""
    graph = nx.DiGraph()
    graph.add_node(name)
    for frame, decode_seconds in frames.items():
        graph.add_edge(name, frame, cost_seconds=decode_seconds)
    for parent, child, seconds in edges:
        graph.add_edge(parent, child, cost_seconds=seconds)
    nx.set_node_attributes(graph, nbytes, "nbytes")
    return graph


def chain_graph(prefix: str = "") -> nx.DiGraph:
    """frame f (100 B, 1 s to decode) -> aug a1, a2 (80 B, 0.1 s) -> clips c1, c2 (80 B, 0.01 s):
    a clip is as big as its aug frame, so only the frame under both saves space."""
    p = prefix
    return video_graph(f"{p}v", {f"{p}f": 1.0},
                       [(f"{p}f", f"{p}a1", 0.1), (f"{p}f", f"{p}a2", 0.1),
                        (f"{p}a1", f"{p}c1", 0.01), (f"{p}a2", f"{p}c2", 0.01)],
                       {f"{p}f": 100, f"{p}a1": 80, f"{p}a2": 80, f"{p}c1": 80, f"{p}c2": 80})


@pytest.mark.parametrize(("budget_bytes", "cached", "seconds"), [
    (1000, {"c1", "c2"}, 0.0),  # everything fits: the leaves
    (160, {"c1", "c2"}, 0.0),
    (159, {"f"}, 0.22),  # collapse two levels into the frame: remake a1, a2, c1, c2
    (100, {"f"}, 0.22),
    (99, set(), 1.22),  # then nothing fits but dropping: decode again
    (0, set(), 1.22),
])
def test_chain(budget_bytes, cached, seconds):
    plan = prune([chain_graph()], budget_bytes)
    assert plan.cached == (frozenset(cached),)
    assert plan.total_nbytes == sum(chain_graph().nodes[n]["nbytes"] for n in cached)
    assert plan.added_recompute_seconds == pytest.approx(seconds)


def test_collapse_into_the_parent_when_it_saves_space():
    # frame 100 B feeds two aug frames; each aug frame feeds a 120 B clip: the aug frames (60 B)
    # are the cheap collapse, the frame the next one
    graph = video_graph("v", {"f": 2.0}, [("f", "a1", 0.1), ("f", "a2", 0.1),
                                          ("a1", "c1", 0.05), ("a2", "c2", 0.05)],
                        {"f": 100, "a1": 60, "a2": 60, "c1": 120, "c2": 120})
    assert prune([graph], 180).cached == (frozenset({"a1", "c2"}),)  # ties: node order
    assert prune([graph], 120).cached == (frozenset({"a1", "a2"}),)
    plan = prune([graph], 100)
    assert plan.cached == (frozenset({"f"}),)
    assert plan.added_recompute_seconds == pytest.approx(0.3)


def test_clips_sharing_parents_collapse_together():
    # two clips of two frames each share f2: caching f1, f2 for c1 alone saves nothing, caching
    # f1, f2, f3 for both saves 50 B
    graph = video_graph("v", {"f1": 1.0, "f2": 1.0, "f3": 1.0},
                        [("f1", "c1", 0.01), ("f2", "c1", 0.01), ("f2", "c2", 0.01),
                         ("f3", "c2", 0.01)],
                        {"f1": 50, "f2": 50, "f3": 50, "c1": 100, "c2": 100})
    plan = prune([graph], 150)
    assert plan.cached == (frozenset({"f1", "f2", "f3"}),)
    assert plan.added_recompute_seconds == pytest.approx(0.04)
    # with an aug step between, the aug frames (0.04 s to remake the clips) beat the frame
    # under them (0.34 s), although both save 50 B
    graph = video_graph("v", {"f": 1.0}, [("f", "a1", 0.1), ("f", "a2", 0.1), ("f", "a3", 0.1),
                                          ("a1", "c1", 0.01), ("a2", "c1", 0.01),
                                          ("a2", "c2", 0.01), ("a3", "c2", 0.01)],
                        {"f": 150, "a1": 50, "a2": 50, "a3": 50, "c1": 100, "c2": 100})
    plan = prune([graph], 150)
    assert plan.cached == (frozenset({"a1", "a2", "a3"}),)
    assert plan.added_recompute_seconds == pytest.approx(0.04)


def test_the_choice_is_global_across_videos():
    cheap = video_graph("v1", {"f1": 1.0}, [("f1", "c1", 0.01)], {"f1": 10, "c1": 100})
    dear = video_graph("v2", {"f2": 1.0}, [("f2", "c2", 5.0)], {"f2": 10, "c2": 100})
    plan = prune([dear, cheap], 120)
    assert plan.cached == (frozenset({"c2"}), frozenset({"f1"}))
    assert plan.added_recompute_seconds == pytest.approx(0.01)


def test_the_videos_walks_merge_by_the_rank_of_each_one_s_next_step():
    """Each video's walk runs alone; their steps are taken in rank order across videos: the
    cheap collapse of v1, then v2's, and v1's dear one only if the budget needs it."""
    v1 = video_graph("v1", {"f1": 1.0, "f2": 1.0}, [("f1", "c1", 0.01), ("f2", "c2", 1.0)],
                     {"f1": 10, "c1": 100, "f2": 10, "c2": 100})
    v2 = video_graph("v2", {"f3": 1.0}, [("f3", "c3", 0.5)], {"f3": 10, "c3": 100})
    plan = prune([v1, v2], 200)
    assert plan.cached == (frozenset({"f1", "c2"}), frozenset({"f3"}))
    assert (plan.collapses, plan.added_recompute_seconds) == (2, pytest.approx(0.51))
    assert prune([v1, v2], 30).cached == (frozenset({"f1", "f2"}), frozenset({"f3"}))


class CountingGraphs(Sequence):
    """Graphs built when asked, as the scheduler's are: counts each one's reads."""

    def __init__(self, graphs: list[nx.DiGraph]) -> None:
        self.graphs, self.reads = graphs, [0] * len(graphs)

    def __len__(self) -> int:
        return len(self.graphs)

    def __getitem__(self, index):
        self.reads[index] += 1
        return ObjectGraph.from_networkx(self.graphs[index])


def test_each_graph_is_read_once_or_twice_when_drops_follow():
    """A window's graphs need not be in memory together (10,000 short videos as networkx
    graphs took 0.5 GB): each is read when its walk runs, again only for drops."""
    graphs = CountingGraphs([chain_graph(f"{i}") for i in range(3)])
    assert prune(graphs, 300).cached == (frozenset({"0f"}), frozenset({"1f"}),
                                         frozenset({"2f"}))
    assert graphs.reads == [1, 1, 1]
    assert prune(graphs, 150).cached == (frozenset(), frozenset(), frozenset({"2f"}))
    assert graphs.reads == [3, 3, 3]


def test_drops_go_by_least_seconds_per_byte():
    graphs = [video_graph(f"v{i}", {f"f{i}": seconds}, [], {f"f{i}": 100})
              for i, seconds in enumerate([3.0, 1.0, 2.0])]
    plan = prune(graphs, 200)
    assert plan.cached == (frozenset({"f0"}), frozenset(), frozenset({"f2"}))


def test_invalid_graphs():
    cyclic = video_graph("v", {"f": 1.0}, [("f", "a", 0.1), ("a", "f", 0.1)], {"f": 1, "a": 1})
    with pytest.raises(ValueError, match="cycle"):
        prune([cyclic], 10)
    two_roots = nx.DiGraph([("v", "f"), ("w", "g")])
    with pytest.raises(ValueError, match="exactly 1 root"):
        prune([two_roots], 10)
    no_size = video_graph("v", {"f": 1.0}, [], {})
    with pytest.raises(ValueError, match="node 'f': nbytes must be >= 0"):
        prune([no_size], 10)
    with pytest.raises(ValueError, match="budget_bytes must be >= 0"):
        prune([chain_graph()], -1)


@st.composite
def video_graphs(draw, index: int) -> nx.DiGraph:
    """A random DAG: a root, then nodes whose parents are earlier nodes (the root among them
    for some), random sizes and op costs."""
    count = draw(st.integers(1, 12))
    graph = nx.DiGraph()
    graph.add_node((index, 0))
    for node in range(1, count + 1):
        parents = draw(st.sets(st.integers(0, node - 1), min_size=1, max_size=3))
        graph.add_node((index, node), nbytes=draw(st.integers(0, 1000)))
        for parent in sorted(parents):
            graph.add_edge((index, parent), (index, node),
                           cost_seconds=draw(st.floats(0, 10, allow_nan=False)))
    return graph


graph_lists = st.integers(1, 4).flatmap(
    lambda n: st.tuples(*(video_graphs(i) for i in range(n))))


@settings(max_examples=150, deadline=None)
@given(graphs=graph_lists, budgets=st.lists(st.integers(0, 8000), min_size=2, max_size=4))
def test_budget_holds_and_more_budget_never_costs_more(graphs, budgets):
    previous_seconds = None
    for budget_bytes in sorted(budgets):
        plan = prune(list(graphs), budget_bytes)
        assert plan.total_nbytes <= budget_bytes
        assert plan.total_nbytes == sum(graph.nodes[n]["nbytes"]
                                        for graph, cached in zip(graphs, plan.cached, strict=True)
                                        for n in cached)
        reference = sum(recompute_seconds(graph, cached)
                        for graph, cached in zip(graphs, plan.cached, strict=True))
        assert plan.added_recompute_seconds == pytest.approx(reference, abs=1e-6)
        if previous_seconds is not None:
            assert plan.added_recompute_seconds <= previous_seconds + 1e-6
        previous_seconds = plan.added_recompute_seconds
        assert prune(list(graphs), budget_bytes) == plan  # deterministic
