"""Communication time per training step on a cluster: per rank class, mesh dim x op x phase,
what can overlap with compute and what is on the critical path (docs/cost-model.md).

Overlap, from what the trace shows (no compute is recorded, so this bounds, not measures):
- an async op (functional collective, `async_op=True`) whose wait comes later than the very next
  event, or is never recorded, can overlap with what runs in between ("async");
- FSDP-style ops, recognised by shape: synchronous all-gathers in forward / backward and
  synchronous reduce-scatters / all-reduces in backward, run on FSDP's own streams, prefetched
  one unit ahead ("prefetch"), except the first all-gather of each phase of a step (nothing runs
  before it) and the last gradient reduction of a step (the optimizer waits for it);
- everything else (a wait right after its op, blocking collectives) is "exposed".

Columnar: per event only a gather by pattern code, one join of waits to their ops and one
group-by; the rest runs on per-rank aggregates.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.cost.cluster import ClusterSpec
from analyzer.cost.model import COMM, op_seconds
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace

GATHERS = ("all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_gather")
GRAD_REDUCTIONS = ("reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "reduce_scatter", "all_reduce")


@dataclass(kw_only=True, slots=True)
class StepCost:
    """What one trace's communication costs per step on one cluster."""

    cluster: ClusterSpec
    """The cluster priced on."""
    steps: int
    """Steps the per-step figures average over (distinct `step` values with forward / backward
    communication)."""
    table: pl.DataFrame
    """class, ranks (text), group (mesh dim label), size, nodes, op, phase, algo, calls, bytes,
    seconds, overlappable (seconds that can hide behind compute), all per step and per rank."""
    classes: pl.DataFrame
    """class, ranks (list), ranks_text, serial (s/step if nothing overlapped), overlappable,
    exposed (serial - overlappable: the critical-path communication)."""
    per_step: pl.DataFrame
    """class, step, serial, exposed (seconds in that step, the class's first rank)."""

    @property
    def worst(self) -> dict:
        """The rank class with the most exposed time per step (a row of `classes`)."""
        if self.classes.height == 0:
            return {"class": 0, "ranks_text": "", "serial": 0.0, "overlappable": 0.0, "exposed": 0.0}
        return self.classes.sort("exposed", "serial", descending=True).row(0, named=True)


def priced_patterns(trace: Trace, cluster: ClusterSpec) -> pl.DataFrame:
    """The trace's communication patterns (one row per (rank, pattern): code, rank, op, group,
    label, phase, async_op, bytes, n, nodes, per_node, seconds, algo): the model runs once per
    pattern, not per event."""
    pats = trace.patterns.filter(pl.col("op").cast(pl.String).is_in(list(COMM))).select(
        "code", "rank", "op", "group", "peer", "in_bytes", "out_bytes", "phase", "async_op"
    )
    priced = op_seconds(pats, cluster, trace.groups)
    return priced.join(
        trace.groups.select("gid", "label"), left_on="group", right_on="gid", how="left", maintain_order="left"
    ).with_columns(pl.col("label").fill_null("?"), pl.col("phase").cast(pl.String).fill_null("other"))


def step_cost(trace: Trace, cluster: ClusterSpec) -> StepCost:
    pats = priced_patterns(trace, cluster)
    ev = trace.with_codes(trace.stream.select("rank", "idx", "code", "step"), pats)
    ev = _overlap(trace, ev, pats)
    # one group-by over events; everything after runs on these aggregates
    agg = ev.group_by("rank", "code", "step", "hidden").agg(calls=pl.len().cast(pl.Int64))
    info = pats.select("code", "label", "op", "phase", "algo", "n", "nodes", "bytes", "seconds")
    agg = agg.join(info, on="code", how="left").with_columns(
        total_bytes=pl.col("bytes") * pl.col("calls"),
        total_seconds=pl.col("seconds") * pl.col("calls"),
    )
    steps = _steps(agg)
    per_rank = (
        agg.group_by("rank", "label", "n", "nodes", "op", "phase", "algo")
        .agg(
            calls=pl.col("calls").sum(),
            bytes=pl.col("total_bytes").sum(),
            seconds=pl.col("total_seconds").sum(),
            overlappable=pl.col("total_seconds").filter(pl.col("hidden")).sum(),
        )
        .sort("rank", "label", "op", "phase")
    )
    classes = _classes(trace, per_rank)
    first = classes.select("class", "ranks_text", rank=pl.col("ranks").list.first())
    table = (
        first.join(per_rank, on="rank")
        .drop("rank")
        .rename({"ranks_text": "ranks", "label": "group", "n": "size"})
        .with_columns(
            calls=pl.col("calls") / steps,
            bytes=pl.col("bytes") / steps,
            seconds=pl.col("seconds") / steps,
            overlappable=pl.col("overlappable") / steps,
        )
        .sort("class", pl.col("seconds"), descending=[False, True])
    )
    totals = table.group_by("class").agg(serial=pl.col("seconds").sum(), overlappable=pl.col("overlappable").sum())
    classes = (
        classes.join(totals, on="class", how="left")
        .with_columns(pl.col("serial", "overlappable").fill_null(0.0))
        .with_columns(exposed=pl.col("serial") - pl.col("overlappable"))
        .sort("class")
    )
    per_step = (
        agg.join(first, on="rank")
        .group_by("class", "step")
        .agg(
            serial=pl.col("total_seconds").sum(),
            exposed=pl.col("total_seconds").filter(~pl.col("hidden")).sum(),
        )
        .sort("class", "step")
    )
    return StepCost(cluster=cluster, steps=steps, table=table, classes=classes, per_step=per_step)


def _steps(agg: pl.DataFrame) -> int:
    """Training steps: distinct `step` values with forward / backward communication (what runs
    after the last optimizer step, a final loss all_reduce, is not a step of its own); any
    communication where no phase is known."""
    train = agg.filter(pl.col("phase").is_in(["forward", "backward"]))
    return max(int((train if train.height else agg)["step"].n_unique()), 1)


def _overlap(trace: Trace, ev: pl.DataFrame, pats: pl.DataFrame) -> pl.DataFrame:
    """`ev` plus `hidden`: whether the event can overlap with compute (the module docstring)."""
    kind = pats.select(
        "code",
        is_async=pl.col("async_op") == 1,
        gather=pl.col("op").is_in(GATHERS) & pl.col("phase").is_in(["forward", "backward"]) & (pl.col("n") > 1),
        reduction=pl.col("op").is_in(GRAD_REDUCTIONS) & (pl.col("phase") == "backward") & (pl.col("n") > 1),
    )
    ev = trace.with_patterns(ev, "is_async", "gather", "reduction", table=kind)
    hidden = pl.lit(False)
    if bool(ev["is_async"].any()):
        waits = trace.select("rank", "idx", "ref", ops=["wait"]).filter(pl.col("ref") >= 0)
        waits = waits.select("rank", idx="ref", distance=pl.col("idx") - pl.col("ref"))
        # several waits on one op (a coalesced batch): the first one counts
        waits = waits.group_by("rank", "idx").agg(pl.col("distance").min())
        ev = ev.join(waits, on=["rank", "idx"], how="left", maintain_order="left")
        hidden = pl.col("is_async") & (pl.col("distance").is_null() | (pl.col("distance") > 1))
    sync = ~pl.col("is_async")
    phase = trace.with_patterns(ev.select("code"), "phase")["phase"].cast(pl.String)
    ev = ev.with_columns(phase=phase)
    first_gather = pl.struct("rank", "step", "phase").is_first_distinct()
    last_reduction = pl.struct("rank", "step").is_last_distinct()
    gathers = ev.filter(sync & pl.col("gather")).select("rank", "idx", first=first_gather)
    reductions = ev.filter(sync & pl.col("reduction")).select("rank", "idx", last=last_reduction)
    ev = ev.join(gathers, on=["rank", "idx"], how="left", maintain_order="left").join(
        reductions, on=["rank", "idx"], how="left", maintain_order="left"
    )
    prefetch = (sync & pl.col("gather") & ~pl.col("first").fill_null(True)) | (
        sync & pl.col("reduction") & ~pl.col("last").fill_null(True)
    )
    return ev.select("rank", "idx", "code", "step", hidden=hidden | prefetch)


def _classes(trace: Trace, per_rank: pl.DataFrame) -> pl.DataFrame:
    """Ranks with identical (group, op, phase, calls, bytes) rows form one class (as summary's)."""
    ranks = pl.DataFrame({"rank": trace.ranks}, schema={"rank": pl.Int32})
    sig = (
        per_rank.with_columns(row=pl.format("{}|{}|{}|{}|{}", "label", "op", "phase", "calls", "bytes"))
        .group_by("rank")
        .agg(sig=pl.col("row").sort().str.join(";"))
    )
    sig = ranks.join(sig.with_columns(pl.col("rank").cast(pl.Int32)), on="rank", how="left").with_columns(
        pl.col("sig").fill_null("")
    )
    classes = (
        sig.group_by("sig")
        .agg(ranks=pl.col("rank").sort())
        .sort(pl.col("ranks").list.first())
        .with_row_index("class", offset=1)
    )
    return classes.select(
        "class",
        "ranks",
        ranks_text=pl.col("ranks").map_elements(lambda r: ranks_text(list(r)), return_dtype=pl.String),
    )
