"""The wait-for graph (analyzer.waitfor.graph) as Graphviz DOT, for `analyzer hang --dot`."""

from __future__ import annotations

import networkx as nx

from analyzer.waitfor.semantics import Blocked


def to_dot(g: nx.DiGraph, blocked: dict[int, Blocked], labels: dict[int, str], on_cycle: set[int]) -> str:
    """The wait-for graph in DOT: an edge r -> m reads "r waits for m"."""
    lines = ["digraph waitfor {", '  rankdir=LR; node [shape=box, fontname="monospace"];']
    for n in sorted(g.nodes):
        b = blocked.get(n)
        label = labels.get(n, "").replace("\n", "\\n")  # DOT's line break
        text = f"rank {n}\\n" + (label if b else "not blocked in a recorded op")
        style = ", color=red, penwidth=2" if n in on_cycle else (", style=dashed" if not b else "")
        lines.append(f'  r{n} [label="{text}"{style}];')
    for u, v in sorted(g.edges):
        lines.append(f"  r{u} -> r{v}{' [color=red]' if u in on_cycle and v in on_cycle else ''};")
    lines.append("}")
    return "\n".join(lines) + "\n"
