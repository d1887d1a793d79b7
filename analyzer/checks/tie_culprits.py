"""Culprits across groups: where a group's own evidence is a tie, the other groups' ties decide.

A group with no strict majority (two members that differ, or 2 against 2) cannot say which of
its members deviates: each tie names all of them. But a rank is a member of several groups (a
2-D mesh: one tp and one dp group), and a rank that does something wrong usually does it in
every group it shares with others. So the ties of one kind that touch each other (share a
member, directly or through other ties of that kind) are read together: the ranks named by
every one of them are the culprits of all of them, and the others are cleared (each agrees
with the rest in another group, or is named by a tie the culprit explains). Where no rank is
named by every tie of a connected set (two independent deviations), nothing is decided and
each tie keeps all its members. One tie alone decides nothing.

Kinds are kept apart: a dtype tie and a skipped-collective tie that happen to share a rank are
not evidence about each other. A missing_collective is one kind whichever way its tie was
spelled (a skip seen from one member is an extra seen from the other).

Columnar: the ties are a (kind, gid, rank) frame; connected sets are the components of the
bipartite group-rank graph of each kind; the counts are polars group-bys."""

from __future__ import annotations

from collections.abc import Mapping, Set

import networkx as nx
import polars as pl

_SCHEMA = {"kind": pl.String, "gid": pl.Int64, "rank": pl.Int64}


def tie_culprits(ties: Mapping[int, tuple[list[int], Set[str]]]) -> dict[int, tuple[list[int], list[int]]]:
    """gid -> (the ranks singled out as its culprits, the tied groups that decided it, itself
    included), for the tied groups the evidence across groups decides. `ties`: gid -> (its
    members, the kinds of finding its tie gave)."""
    rows = [(kind, gid, r) for gid, (members, kinds) in ties.items() for kind in kinds for r in members]
    if len(ties) < 2 or not rows:
        return {}
    named = pl.DataFrame(rows, schema=_SCHEMA, orient="row")
    named = named.join(_components(named), on=["kind", "gid"])
    # per (kind, component): how many ties it holds; a rank named by each of them is its culprit
    size = named.group_by("kind", "comp").agg(ties=pl.col("gid").n_unique())
    every = (
        named.group_by("kind", "comp", "rank")
        .agg(n=pl.col("gid").n_unique())
        .join(size, on=["kind", "comp"])
        .filter((pl.col("n") == pl.col("ties")) & (pl.col("ties") >= 2))
        .group_by("kind", "comp")
        .agg(culprits=pl.col("rank").sort())
        .join(named.group_by("kind", "comp").agg(by=pl.col("gid").unique().sort()), on=["kind", "comp"])
    )
    per_kind = (
        named.select("kind", "gid", "comp")
        .unique()
        .join(every, on=["kind", "comp"], how="left")
        .with_columns(culprits=pl.col("culprits").fill_null(pl.lit([], dtype=pl.List(pl.Int64))))
    )
    # a group is decided when every kind of its tie names the same culprits, and they are not
    # all its members (that would decide nothing)
    decided = (
        per_kind.group_by("gid")
        .agg(
            culprits=pl.col("culprits").first(),
            by=pl.col("by").explode().unique().sort(),
            agree=pl.col("culprits").n_unique() == 1,
        )
        .filter(pl.col("agree") & (pl.col("culprits").list.len() > 0))
    )
    out: dict[int, tuple[list[int], list[int]]] = {}
    for gid, culprits, by in decided.select("gid", "culprits", "by").iter_rows():
        if len(culprits) < len(ties[gid][0]):
            out[gid] = (culprits, by)
    return out


def _components(named: pl.DataFrame) -> pl.DataFrame:
    """(kind, gid, comp): which connected set of ties of its kind each tie is in (ties connect
    through the ranks they name)."""
    out: list[tuple[str, int, int]] = []
    for (kind,), part in named.group_by("kind"):
        graph = nx.Graph()
        graph.add_edges_from((("g", g), ("r", r)) for g, r in part.select("gid", "rank").iter_rows())
        for comp, nodes in enumerate(nx.connected_components(graph)):
            out.extend((kind, node[1], comp) for node in nodes if node[0] == "g")
    return pl.DataFrame(out, schema={"kind": pl.String, "gid": pl.Int64, "comp": pl.Int64}, orient="row")
