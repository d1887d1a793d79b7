"""The wait-for graph of a hang or deadlock as a picture (networkx layout, matplotlib, SVG).

An arrow r -> m reads "rank r waits for rank m" (as in `analyzer hang --dot`). Red: ranks on a
deadlock cycle; orange: stalled ranks, waited on but not blocked in any recorded op (the root
cause of a hang: dead, or stuck in compute); grey: blocked ranks waiting on those.

Layout: layered like Graphviz's dot with rankdir=LR, from networkx's multipartite layout: the
root causes (cycle and stalled ranks) in the right-most column, the ranks waiting on them one
column to the left, the ranks waiting on those further left, so arrows run right. A cycle alone
is drawn as a circle. A hung job of thousands of ranks has thousands of waiters, and a picture
of all of them shows nothing: each column keeps PER_LAYER ranks and folds the rest into one
"+N waiting" node of that column (arrows to what they wait on), columns past MAX_LAYERS fold
into one node, and the caption says how many ranks were left out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import networkx as nx

from analyzer.render.plots import RC, figure, to_svg
from analyzer.waitfor.graph import cycles

MAX_ROOTS = 16
PER_LAYER = 12
MAX_LAYERS = 4
"""Columns of waiters drawn (distance from the root causes); farther waiters are folded."""
LABELLED = 10
"""Up to this many drawn ranks, every rank gets a note saying what it is blocked in (above
that, only the root causes do)."""
COLOURS = {"cycle": "#d62728", "stalled": "#ff7f0e", "waiting": "#9aa5b1", "omitted": "#e6eaef"}
LEGEND = {
    "cycle": "on a deadlock cycle",
    "stalled": "stalled: never entered (root cause)",
    "waiting": "blocked, waiting",
    "omitted": "waiting ranks folded (not drawn)",
}


@dataclass(kw_only=True, slots=True)
class WaitPicture:
    svg: str
    drawn: int
    """Ranks drawn as their own node."""
    omitted: int
    """Waiting ranks folded into "+N" nodes."""
    cycle_ranks: list[int]
    stalled_ranks: list[int]


def roles(graph: nx.DiGraph, stuck: dict) -> tuple[list[int], list[int]]:
    """(ranks on a cycle, in cycle order; stalled ranks: waited on, not blocked themselves)."""
    on_cycle = [r for c in cycles(graph) for r in c]
    stalled = sorted(n for n in graph.nodes if graph.out_degree(n) == 0 and n not in stuck)
    return on_cycle, stalled


def layers(graph: nx.DiGraph, roots: list[int]) -> dict[int, int]:
    """Rank -> distance from the nearest root, breadth-first against the arrows."""
    depth = {r: 0 for r in roots}
    queue = deque(roots)
    while queue:
        node = queue.popleft()
        for waiter in graph.predecessors(node):
            if waiter not in depth:
                depth[waiter] = depth[node] + 1
                queue.append(waiter)
    return depth


def fold(graph: nx.DiGraph, roots: list[int]) -> tuple[nx.DiGraph, dict, int]:
    """The graph to draw: kept ranks per layer, one "+N" node per layer for the rest.
    Returns (graph with a "layer" attribute per node, fold node -> count, ranks folded)."""
    # roots first (cycle / stalled), then any sink that is blocked but waits on nobody drawn
    roots = list(dict.fromkeys(roots + sorted(n for n in graph.nodes if graph.out_degree(n) == 0)))
    depth = layers(graph, roots)
    for n in sorted(graph.nodes):  # unreachable from every root (not expected): beside the roots
        depth.setdefault(n, 1)
    by_layer: dict[int, list] = {}
    for n in sorted(graph.nodes, key=lambda n: (depth[n], n)):
        by_layer.setdefault(min(depth[n], MAX_LAYERS + 1), []).append(n)
    shown = nx.DiGraph()
    stand_in: dict = {}  # rank -> the node that draws it (itself or its layer's fold node)
    folds: dict = {}
    top = max(by_layer)
    for layer in sorted(by_layer):
        members = by_layer[layer]
        cap = MAX_ROOTS if layer == 0 else (0 if layer > MAX_LAYERS else PER_LAYER)
        for n in members[:cap]:
            shown.add_node(n, layer=top - layer)
            stand_in[n] = n
        if len(members) > cap:
            key = f"+{layer}"
            folds[key] = len(members) - cap
            shown.add_node(key, layer=top - layer)
            for n in members[cap:]:
                stand_in[n] = key
    for u, v in graph.edges:
        a, b = stand_in[u], stand_in[v]
        if a != b:
            shown.add_edge(a, b)
    return shown, folds, sum(folds.values())


def ordered(pos: dict, shown: nx.DiGraph, folds: dict) -> dict:
    """Reorder each column of a multipartite layout top to bottom: roots as given, every other
    rank at the mean height of the ranks it waits on (fewer crossing arrows), fold nodes last."""
    columns: dict[int, list] = {}
    for n, layer in shown.nodes(data="layer"):
        columns.setdefault(layer, []).append(n)
    out = dict(pos)
    for layer in sorted(columns, reverse=True):  # roots' column (right-most) first
        nodes = columns[layer]
        slots = sorted((pos[n][1] for n in nodes), reverse=True)

        def height(n, layer=layer):
            ahead = [out[m][1] for m in shown.successors(n) if shown.nodes[m]["layer"] > layer]
            return -sum(ahead) / len(ahead) if ahead else 0.0

        rest = [n for n in nodes if n not in folds]
        if layer != max(columns):
            rest.sort(key=lambda n: (height(n), n))
        for n, y in zip(rest + [n for n in nodes if n in folds], slots):
            out[n] = (pos[n][0], y)
    return out


def draw(hang, note=None) -> WaitPicture | None:
    """The picture of `hang` (analyzer.hang.HangReport), or None when no rank waits on another.
    `note(rank) -> str`: the text under a drawn rank (asked only for the ranks that get one)."""
    graph: nx.DiGraph = hang.graph
    if graph.number_of_edges() == 0:
        return None
    import matplotlib
    from matplotlib.lines import Line2D

    on_cycle, stalled = roles(graph, hang.stuck)
    shown, folds, omitted = fold(graph, on_cycle + stalled)
    role = {n: "omitted" if n in folds else "waiting" for n in shown.nodes}
    role.update({n: "stalled" for n in stalled if n in shown})
    role.update({n: "cycle" for n in on_cycle if n in shown})
    ranks = [n for n in shown.nodes if n not in folds]
    columns: dict[int, list] = {}
    for n, layer in shown.nodes(data="layer"):
        columns.setdefault(layer, []).append(n)
    only_cycle = len(columns) == 1 and all(role[n] == "cycle" for n in shown.nodes)
    if only_cycle:  # a deadlock alone: a circle in wait order
        order = [n for n in on_cycle if n in shown]
        pos = nx.circular_layout(nx.DiGraph(zip(order, order[1:] + order[:1])))
    else:
        pos = ordered(nx.multipartite_layout(shown, subset_key="layer"), shown, folds)
    tallest = max(len(c) for c in columns.values())
    labelled = len(ranks) <= LABELLED
    size = 900 if labelled else 560
    with matplotlib.rc_context(RC):
        per_node = 1.1 if labelled else 0.5  # a note under each node needs the room
        fig = figure(9.5, 4.8 if only_cycle else min(11.0, max(3.6, per_node * tallest + 1.2)))
        ax = fig.add_subplot()
        ax.set_axis_off()
        nx.draw_networkx_nodes(
            shown,
            pos,
            nodelist=ranks,
            node_color=[COLOURS[role[n]] for n in ranks],
            node_size=size,
            edgecolors="#333333",
            linewidths=0.8,
            ax=ax,
        )
        nx.draw_networkx_labels(
            shown, pos, labels={n: str(n) for n in ranks}, font_size=8.5, font_weight="bold", font_color="white", ax=ax
        )
        if folds:
            nx.draw_networkx_nodes(
                shown,
                pos,
                nodelist=list(folds),
                node_color=COLOURS["omitted"],
                node_shape="s",
                node_size=1500,
                edgecolors="#888888",
                linewidths=0.8,
                ax=ax,
            )
            nx.draw_networkx_labels(
                shown, pos, labels={k: f"+{c}\nwaiting" for k, c in folds.items()}, font_size=7.5, ax=ax
            )
        red = [(u, v) for u, v in shown.edges if role[u] == "cycle" and role[v] == "cycle"]
        grey = [e for e in shown.edges if role[e[0]] != "cycle" or role[e[1]] != "cycle"]
        # curved arrows: the two arrows of a 2-rank cycle would otherwise lie on top of each other
        for edges, colour, width in ((grey, "#7a8691", 0.9), (red, COLOURS["cycle"], 2.2)):
            if edges:
                nx.draw_networkx_edges(
                    shown,
                    pos,
                    edgelist=edges,
                    edge_color=colour,
                    width=width,
                    arrows=True,
                    arrowsize=13,
                    connectionstyle="arc3,rad=0.12",
                    node_size=size,
                    ax=ax,
                )
        for n in ranks:
            root = role[n] in ("cycle", "stalled")
            text = note(n) if note is not None and (labelled or root) else ""
            if not text:
                continue
            # root causes of a layered picture sit in the right-most column: their note goes right,
            # clear of the arrows coming in from the left; other notes go under their node
            right = root and not only_cycle
            ax.annotate(
                text,
                pos[n],
                xytext=(16, 0) if right else (0, -17),
                textcoords="offset points",
                ha="left" if right else "center",
                va="center" if right else "top",
                fontsize=7.5,
                color="#333333",
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85},
                zorder=0.5,
            )  # under nodes and arrows: a long note never hides a neighbour
        ax.margins(x=0.16, y=0.2 if only_cycle else 0.1)
        if not only_cycle:  # room on the right for the root causes' notes
            lo, hi = ax.get_xlim()
            ax.set_xlim(lo, hi + 0.45 * (hi - lo))
        used = [r for r in ("cycle", "stalled", "waiting", "omitted") if r in role.values()]
        handles = [
            Line2D(
                [],
                [],
                marker="s" if r == "omitted" else "o",
                linestyle="",
                markersize=10,
                markerfacecolor=COLOURS[r],
                markeredgecolor="#333333",
                label=LEGEND[r],
            )
            for r in used
        ]
        fig.legend(handles=handles, loc="outside upper center", ncols=len(handles), fontsize=9)
        svg = to_svg(fig, "waitfor")
    return WaitPicture(
        svg=svg, drawn=len(ranks), omitted=omitted, cycle_ranks=sorted(set(on_cycle)), stalled_ranks=stalled
    )
