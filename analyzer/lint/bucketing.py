"""Many small collectives of one kind on one group in one step: each pays the collective's fixed
latency (launch, NCCL's protocol handshake: tens of microseconds) for little data, where one
bucketed call (DDP's gradient buckets, FSDP's flat per-unit buffers, a coalescing manager)
pays it once.

What counts: collectives a user's code issues itself: not DTensor's (activation traffic the
layout dictates, one per layer op), not FSDP2's (already one flat buffer per unit), not members
of a coalesced batch, and not an async call whose wait comes before the next call of its kind on
its group (a chain: each call may need the one before, as a loss-parallel max then sum does).
Calls are grouped by rank, step, phase, group, op, dtype and reduce op."""

from __future__ import annotations

import math

import polars as pl

from analyzer.lint.common import advice, priced, summarize, time_text, where
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import ADVICE, Kind
from analyzer.model.trace import Trace

UNBUCKETED = Kind(
    name="unbucketed_collectives",
    about="many small collectives on one group per step that one bucketed call could carry",
    severity=ADVICE,
)

BUCKETABLE = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter")
"""Ops users issue per tensor (gradients, parameters, buffers)."""
MIN_CALLS = 8
"""At least this many calls on one group per step in one phase..."""
BUCKET_BYTES = 25 * 1024 * 1024
"""...each smaller than DDP's default bucket (bucket_cap_mb=25)..."""
MIN_SAVING = 2
"""...and buckets of that size would need at most 1/MIN_SAVING as many calls."""


def lint(trace: Trace, options: LintOptions, comm: pl.DataFrame) -> Linted:
    keys = ["group", "phase", "op", "dtype", "reduce_op"]
    rows = comm.filter(
        pl.col("op").is_in(BUCKETABLE)
        & (pl.col("parent") < 0)
        & ~pl.col("fsdp")
        & (pl.col("batch") < 0)
        & (pl.col("in_bytes") < BUCKET_BYTES)
        & (pl.col("size") > 1)
    )
    rows = _independent(trace, rows, keys)
    per = rows.group_by(["rank", "step", *keys]).agg(
        pl.col("size", "nodes", "per_node").first(),
        n=pl.len(),
        total=pl.col("in_bytes").clip(0).sum(),
        total_out=pl.col("out_bytes").clip(0).sum(),
    )
    per = per.with_columns(buckets=(pl.col("total") / BUCKET_BYTES).ceil().clip(1).cast(pl.Int64))
    per = per.filter((pl.col("n") >= MIN_CALLS) & (pl.col("n") >= MIN_SAVING * pl.col("buckets")))
    if options.cost is not None and per.height:
        # what the buckets would cost instead, spread over the calls: the rows then sum to the saving
        bucketed = options.cost(
            per.with_columns(
                in_bytes=pl.col("total") // pl.col("buckets"), out_bytes=pl.col("total_out") // pl.col("buckets")
            )
        )
        per = per.with_columns(instead=bucketed * pl.col("buckets") / pl.col("n"))
    else:
        per = per.with_columns(instead=pl.lit(0.0))
    on = ["rank", "step", *keys]
    rows = rows.join(per.select(*on, "instead"), on=on, nulls_equal=True, maintain_order="left")
    rows = priced(rows, options).with_columns(seconds=pl.col("seconds") - pl.col("instead"))
    out = Linted()
    for r in summarize(rows, ["label", "phase", "op", "dtype", "reduce_op"]):
        buckets = max(1, math.ceil(r["bytes"] / BUCKET_BYTES))
        out.findings.append(
            advice(
                UNBUCKETED,
                trace,
                r,
                f"{r['per_step']} separate {r['op']} calls ({r['dtype']}) per step on {r['label']} in "
                f"{r['phase']}, {r['bytes'] / r['per_step'] / 1024:.1f} KiB each on average, {where(r)}"
                f"{time_text(r['seconds'], 'that buckets would save')}: bucket them "
                f"({buckets} call{'s' if buckets > 1 else ''} of at most "
                f"{BUCKET_BYTES >> 20} MiB: flatten into one buffer, dist._coalescing_manager, "
                "or let DDP / FSDP reduce)",
            )
        )
    return out


def _independent(trace: Trace, rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Less the async calls waited on before the next call of their kind is issued."""
    if not (rows["async_op"] == 1).any():
        return rows
    waits = trace.select("rank", "idx", "ref", ops=["wait"]).filter(pl.col("ref") >= 0)
    first_wait = waits.group_by("rank", "ref").agg(waited=pl.col("idx").min())
    rows = rows.join(first_wait, left_on=["rank", "idx"], right_on=["rank", "ref"], how="left")
    nxt = pl.col("idx").shift(-1).over(["rank", *keys], order_by="idx")
    chained = (pl.col("async_op") == 1) & pl.col("waited").is_not_null() & (pl.col("waited") < nxt.fill_null(-1))
    return rows.filter(~chained).drop("waited")
