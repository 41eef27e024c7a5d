"""The pipeline's step graph (graphlib, so that the command line's config check need not
import networkx): the same order and the same verdict on cycles as networkx."""

from __future__ import annotations

import graphlib
import itertools

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from sandfs.config.pipeline import _topological_order

graphs = st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=16)))


def reference(count: int, edges: set[tuple[int, int]]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(count))
    graph.add_edges_from(edges)
    return graph


def find_cycle(count: int, edges: set[tuple[int, int]]) -> list[int] | None:
    """The cycle the config check reports (graphlib repeats its first step at the end)."""
    try:
        _topological_order(count, edges)
    except graphlib.CycleError as error:
        return error.args[1][:-1]
    return None


@settings(max_examples=300, deadline=None)
@given(graphs)
def test_cycles_and_order_match_networkx(graph):
    count, edges = graph
    cycle = find_cycle(count, edges)
    if nx.is_directed_acyclic_graph(reference(count, edges)):
        assert cycle is None
        assert _topological_order(count, edges) == list(
            nx.lexicographical_topological_sort(reference(count, edges)))
    else:
        assert cycle, "networkx finds a cycle"
        ring = [*cycle, cycle[0]]
        assert all((u, v) in edges for u, v in itertools.pairwise(ring))
        assert len(set(cycle)) == len(cycle)


def test_a_self_loop_is_a_cycle():
    assert find_cycle(2, {(0, 1), (1, 1)}) == [1]
