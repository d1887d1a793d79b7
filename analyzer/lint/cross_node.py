"""A tensor / context / expert parallel group whose members sit on more than one node.

tp, cp and ep move activations on every layer, forward and backward, on the critical path: NCCL
runs them at the slowest link the group crosses, the NICs' instead of NVLink's (an order of
magnitude less bandwidth on a DGX). Data parallel dims (dp, fsdp, dp_replicate, ...) and pp are
meant to cross nodes and are not judged (the dims: analyzer.lint.common.TIGHT_DIMS). A group
counts only when collectives ran on it."""

from __future__ import annotations

import polars as pl

from analyzer.lint.common import advice, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

CROSS_NODE_GROUP = Kind(
    name="cross_node_group",
    about="a tp / cp / ep group spans nodes: its per-layer collectives run at inter-node speed",
    severity=ADVICE,
)


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    rows = comm.filter(pl.col("tight") & (pl.col("nodes") > 1) & (pl.col("size") > 1))
    rows = priced(rows, options)
    if options.cost is not None and rows.height:
        inside = options.cost(rows.with_columns(nodes=pl.lit(1, dtype=pl.Int64), per_node=pl.col("size")))
        rows = rows.with_columns(seconds=(pl.col("seconds") - inside).clip(0))
    out = Linted()
    for r in summarize(rows, ["label"]):
        spans = rows.filter(pl.col("label") == r["label"]).select(pl.col("nodes").max()).item()
        out.findings.append(
            advice(
                CROSS_NODE_GROUP,
                trace,
                r,
                f"{r['label']} groups span up to {spans} nodes {options.placement.spell()}: "
                f"{r['per_step']} collectives per step per rank cross the inter-node links"
                f"{time_text(r['seconds'], 'more than inside one node')}, {where(r)}; keep {r['label']} inside a node "
                f"(its degree at most the GPUs per node, and the innermost mesh dim so its ranks are consecutive)",
            )
        )
    return out
