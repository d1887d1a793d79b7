"""What was recorded, per rank class: collectives and bytes per group (mesh dim) and op.

Ranks whose (group label, op, calls, bytes) rows are identical form one rank class, so a
64-rank FSDP x TP run prints a handful of classes, not 64 tables. Pure: Trace -> frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace
from traceformat.ops import COMM_OPS


@dataclass
class Summary:
    table: pl.DataFrame
    """class, ranks (e.g. '0-3'), group (mesh dim label), size, op, calls, bytes (per rank)."""
    classes: pl.DataFrame
    """class, ranks (list), events (per rank)."""


def comm_events(trace: Trace) -> pl.DataFrame:
    """Collective and p2p events with their group label/size and `bytes` = larger buffer side."""
    ops = sorted(COMM_OPS)
    return (
        trace.select("rank", "op", "group", "in_bytes", "out_bytes", "phase", "step", ops=ops)
        .join(trace.groups.select("gid", "label", "size"), left_on="group", right_on="gid", how="left")
        .with_columns(bytes=pl.max_horizontal("in_bytes", "out_bytes"), op=pl.col("op").cast(pl.String))
    )


def summarize(trace: Trace) -> Summary:
    ev = comm_events(trace)
    per_rank = (
        ev.group_by("rank", "label", "size", "op")
        .agg(calls=pl.len().cast(pl.Int64), bytes=pl.col("bytes").sum())
        .sort("rank", "label", "op")
    )
    counts = trace.stream.group_by("rank").agg(events=pl.len())
    sig = (
        per_rank.with_columns(row=pl.format("{}|{}|{}|{}", "label", "op", "calls", "bytes"))
        .group_by("rank")
        .agg(sig=pl.col("row").sort().str.join(";"))
    )
    sig = counts.join(sig, on="rank", how="left").with_columns(pl.col("sig").fill_null(""))
    classes = (
        sig.group_by("sig", "events")
        .agg(ranks=pl.col("rank").sort())
        .sort(pl.col("ranks").list.first())
        .with_row_index("class", offset=1)
    )
    first = classes.select(
        "class",
        rank=pl.col("ranks").list.first(),
        ranks_text=pl.col("ranks").map_elements(lambda r: ranks_text(list(r)), return_dtype=pl.String),
    )
    table = (
        first.join(per_rank, on="rank")
        .drop("rank")
        .rename({"ranks_text": "ranks", "label": "group"})
        .sort("class", "group", "op")
    )
    return Summary(table=table, classes=classes.select("class", "ranks", "events"))
