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

import numpy as np
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
    hidden = _hidden(trace, ev, pats)
    codes = ev["code"].to_numpy()
    # per pattern: calls and hidden calls, one bincount each (codes are global: a pattern is a rank's)
    size = trace.patterns.height
    counts = pl.DataFrame(
        {
            "code": np.arange(size, dtype=np.int32),
            "calls": np.bincount(codes, minlength=size).astype(np.int64),
            "hidden_calls": np.bincount(codes[hidden], minlength=size).astype(np.int64),
        }
    )
    info = pats.select("code", "rank", "label", "op", "phase", "algo", "n", "nodes", "bytes", "seconds")
    agg = info.join(counts, on="code", how="left").filter(pl.col("calls") > 0)
    steps = _steps(trace, ev, pats)
    per_rank = (
        agg.group_by("rank", "label", "n", "nodes", "op", "phase", "algo")
        .agg(
            calls=pl.col("calls").sum(),
            bytes=(pl.col("bytes") * pl.col("calls")).sum(),
            seconds=(pl.col("seconds") * pl.col("calls")).sum(),
            overlappable=(pl.col("seconds") * pl.col("hidden_calls")).sum(),
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
    # per step: only the classes' first ranks (a handful of streams, not every event)
    mine = ev.with_columns(hidden=pl.Series(hidden)).filter(pl.col("rank").is_in(first["rank"].implode()))
    per_step = (
        mine.join(pats.select("code", "seconds"), on="code", how="left")
        .join(first.select("rank", "class"), on="rank")
        .group_by("class", "step")
        .agg(serial=pl.col("seconds").sum(), exposed=pl.col("seconds").filter(~pl.col("hidden")).sum())
        .sort("class", "step")
    )
    return StepCost(cluster=cluster, steps=steps, table=table, classes=classes, per_step=per_step)


def _steps(trace: Trace, ev: pl.DataFrame, pats: pl.DataFrame) -> int:
    """Training steps: distinct `step` values with forward / backward communication (what runs
    after the last optimizer step, a final loss all_reduce, is not a step of its own); any
    communication where no phase is known."""
    train = trace.with_codes(ev.select("code", "step"), pats.filter(pl.col("phase").is_in(["forward", "backward"])))
    return max(int((train if train.height else ev)["step"].n_unique()), 1)


def _hidden(trace: Trace, ev: pl.DataFrame, pats: pl.DataFrame) -> np.ndarray:
    """Per event of `ev` (stream order): whether it can overlap with compute (the module
    docstring). O(events) numpy over the stream; a join only for async ops and their waits."""
    size = trace.patterns.height
    kind = np.zeros(size, dtype=np.int8)  # 1 async, 2 FSDP-style gather, 3 FSDP-style reduction
    phase = np.zeros(size, dtype=np.int8)
    p = pats.select(
        "code",
        is_async=pl.col("async_op") == 1,
        gather=pl.col("op").is_in(GATHERS) & pl.col("phase").is_in(["forward", "backward"]) & (pl.col("n") > 1),
        reduction=pl.col("op").is_in(GRAD_REDUCTIONS) & (pl.col("phase") == "backward") & (pl.col("n") > 1),
        phase=pl.col("phase").replace_strict({"forward": 1, "backward": 2}, default=0, return_dtype=pl.Int8),
    )
    code = p["code"].to_numpy()
    kind[code[p["reduction"].to_numpy()]] = 3
    kind[code[p["gather"].to_numpy()]] = 2
    kind[code[p["is_async"].to_numpy()]] = 1
    phase[code] = p["phase"].to_numpy()
    codes = ev["code"].to_numpy()
    k = kind[codes]
    hidden = np.zeros(len(codes), dtype=bool)
    rank, step = ev["rank"].to_numpy(), ev["step"].to_numpy()
    at = np.flatnonzero(k == 1)
    if len(at):
        waits = trace.select("rank", "idx", "ref", ops=["wait"]).filter(pl.col("ref") >= 0)
        # several waits on one op (a coalesced batch): the first one counts
        waits = waits.group_by("rank", idx="ref").agg(distance=(pl.col("idx") - pl.col("ref")).min())
        issued = ev[at].select("rank", "idx").with_columns(at=pl.Series(at))
        joined = issued.join(waits, on=["rank", "idx"], how="left")
        d = joined["distance"]
        hidden[joined["at"].to_numpy()] = (d.is_null() | (d > 1)).to_numpy()
    g = np.flatnonzero(k == 2)  # FSDP prefetch: every gather but the first of its (rank, step, phase)
    if len(g):
        first = np.ones(len(g), dtype=bool)
        gp = phase[codes[g]]
        first[1:] = (rank[g][1:] != rank[g][:-1]) | (step[g][1:] != step[g][:-1]) | (gp[1:] != gp[:-1])
        hidden[g[~first]] = True
    r = np.flatnonzero(k == 3)  # gradient reductions: every one but the last of its (rank, step)
    if len(r):
        last = np.ones(len(r), dtype=bool)
        last[:-1] = (rank[r][1:] != rank[r][:-1]) | (step[r][1:] != step[r][:-1])
        hidden[r[~last]] = True
    return hidden


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
