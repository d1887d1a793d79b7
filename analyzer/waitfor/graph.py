"""Wait-for graphs of blocked ranks: an edge r -> m reads "r waits for m"; a deadlock is a cycle."""

from __future__ import annotations

import networkx as nx

from analyzer.waitfor.semantics import Blocked


def wait_graph(blocked: dict[int, Blocked]) -> nx.DiGraph:
    g = nx.DiGraph()
    for b in blocked.values():
        g.add_node(b.rank)
        for m in b.waits_for:
            g.add_edge(b.rank, m)
    return g


def cycles(g: nx.DiGraph) -> list[list[int]]:
    """Each strongly connected set of waiting ranks (a deadlock), as one concrete cycle first."""
    out = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) < 2:
            continue
        cycle = [u for u, _ in nx.find_cycle(g.subgraph(scc))]
        out.append(cycle + sorted(scc - set(cycle)))
    return sorted(out, key=min)
