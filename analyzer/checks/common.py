"""Helpers the checks share: group tables, atom decoding, majority votes (their texts: analyzer.model.text)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from analyzer.model.trace import Trace


def group_table(trace: Trace) -> dict[int, dict]:
    """gid -> {"name", "label", "ranks"} (the JSON `group` of a finding)."""
    return {
        g["gid"]: {"name": g["name"], "label": g["label"], "ranks": list(g["ranks"])}
        for g in trace.groups.iter_rows(named=True)
    }


def conflicting_gids(trace: Trace) -> set[int]:
    """Groups whose name means different member lists on different ranks (created in another
    order, or with other members): their collectives cannot be matched, group_mismatch says why."""
    made = trace.select("group", ops=["new_group", "split_group"])
    per_name = (
        made.join(trace.groups.select("gid", "name"), left_on="group", right_on="gid")
        .group_by("name")
        .agg(gids=pl.col("group").unique())
    )
    out: set[int] = set()
    for gids in per_name.filter(pl.col("gids").list.len() > 1)["gids"]:
        out.update(gids)
    return out


def atom_values(trace: Trace, ids) -> dict[int, Any]:
    """Decode the distinct atom ids of a column (few, even for millions of events)."""
    return {int(i): trace.atom(int(i)) for i in ids if i is not None}


def majority(values: dict[int, Any]) -> tuple[Any, list[int]]:
    """(majority value, deviating ranks). Without a strict majority every rank deviates; no
    votes at all (a group none of whose members has a stream): (None, [])."""
    if not values:
        return None, []
    counts = Counter(values.values())
    value, n = counts.most_common(1)[0]
    if n * 2 <= len(values) and len(counts) > 1:
        return value, sorted(values)
    return value, sorted(r for r, v in values.items() if v != value)
