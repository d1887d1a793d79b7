"""Where a dry run's ranks end up blocked, columnar: the least fixed point of "a rank blocks at
its first op whose instance cannot complete", for traces whose ordering certificate holds.

Why it is exact there: `waitfor.certificate.ordered` proves that some numbering T of the instances grows
along every stream, so replaying instances in T order is the replay. An instance completes iff
every party issues it; a party fails to issue it iff it blocked earlier in its own stream. So,
starting from the instances some party never issues at all, each round marks the instances
that a blocked party never reaches, and blocks their parties there (at the op, or at its wait
when async; never at an eager send). A handful of rounds of joins over the events replaces
`waitfor.replay.simulate`, which walks 82 M events in Python (minutes and ~24 GB at that size).
"""

from __future__ import annotations

import polars as pl

from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import (
    COLLECTIVE,
    SEND,
    WAIT,
    Blocked,
    WaitKey,
    comm_patterns,
    group_members,
    waits_for,
    with_waits,
)

MAX_ROUNDS = 64


def settle(trace: Trace, eager_bytes: int = 0) -> dict[int, Blocked] | None:
    """Ranks left blocked, as waitfor.replay.simulate gives them; None if it does not converge."""
    members = group_members(trace)
    present = set(trace.ranks)
    pats = comm_patterns(trace).with_columns(
        eager=(pl.col("kind") == SEND) & (pl.col("in_bytes") <= eager_bytes) & (eager_bytes > 0)
    )
    ev = trace.with_patterns(
        trace.with_codes(trace.stream.select("rank", "idx", "code", "seq"), pats),
        "group",
        "kind",
        "async_op",
        "eager",
        table=pats,
    )
    ops = with_waits(trace, ev.filter(pl.col("kind") != WAIT), ev, pats)
    # where the rank stops if the op never completes: at the op, at its wait, or nowhere
    ops = ops.with_columns(
        bp=pl.when(pl.col("async_op") == 1).then("wait_idx").when(pl.col("eager")).then(None).otherwise("idx")
    )
    ops = ops.with_columns(inst=_instances(trace, ops, pats))
    del ev
    size = pl.DataFrame(
        {"group": list(members), "need": [len([m for m in ms if m in present]) for ms in members.values()]},
        schema={"group": pl.Int32, "need": pl.Int64},
    )
    count = (
        ops.group_by("inst")
        .agg(n=pl.len(), group=pl.col("group").first(), kind=pl.col("kind").first())
        .join(size, on="group", how="left")
        .with_columns(need=pl.when(pl.col("kind") == COLLECTIVE).then("need").otherwise(2))
    )
    never = count.filter(pl.col("n") < pl.col("need")).select("inst")
    ops = ops.select("rank", "idx", "code", "seq", "wait_idx", "inst", "bp")  # 82 M rows: keep them lean
    lean = ops.select("rank", "idx", "inst", "bp")
    blocked_at = pl.DataFrame(schema={"rank": pl.Int32, "b": pl.Int32})
    for _ in range(MAX_ROUNDS):
        late = lean.join(blocked_at, on="rank", how="inner").filter(pl.col("b") < pl.col("idx")).select("inst").unique()
        stuck_inst = pl.concat([never, late]).unique()
        new = (
            lean.join(stuck_inst, on="inst", how="semi")
            .filter(pl.col("bp").is_not_null())
            .group_by("rank")
            .agg(b=pl.col("bp").min().cast(pl.Int32))
            .sort("rank")
        )
        if new.equals(blocked_at):
            break
        blocked_at = new
    else:
        return None
    return _blocked(trace, ops, blocked_at, never, pats, members, present)


def _instances(trace: Trace, ops: pl.DataFrame, pats: pl.DataFrame) -> pl.Series:
    """One int64 id per instance: (group, seq) for collectives; p2p (group, src, dst, seq) as
    negative dense ids (exact, no hashing)."""
    coll = (ops["group"].cast(pl.Int64) * (1 << 40) + ops["seq"]).alias("inst")
    if not (ops["kind"] != COLLECTIVE).any():
        return coll
    peer = trace.with_patterns(ops.select("code"), "peer", table=pats)["peer"]
    p2p = ops.select(
        src=pl.when(pl.col("kind") == SEND).then("rank").otherwise(peer),
        dst=pl.when(pl.col("kind") == SEND).then(peer).otherwise("rank"),
        group="group",
        seq="seq",
    )
    ids = -p2p.select(pl.struct("group", "src", "dst", "seq").rank("dense").cast(pl.Int64)).to_series()
    return pl.select(pl.when(ops["kind"] == COLLECTIVE).then(coll).otherwise(ids)).to_series().alias("inst")


def _blocked(trace, ops, blocked_at, never, pats, members, present) -> dict[int, Blocked]:
    if blocked_at.is_empty():
        return {}
    rows = ops.join(blocked_at, left_on=["rank", "bp"], right_on=["rank", "b"], how="semi")
    steps = trace.stream.select("rank", "idx", "step").join(rows.select("rank", "idx"), on=["rank", "idx"], how="semi")
    rows = trace.with_patterns(
        rows.join(steps, on=["rank", "idx"]),
        "op",
        "group",
        "peer",
        "async_op",
        "in_bytes",
        "frame",
        "module",
        "phase",
        table=pats,
    )
    # who entered the instances ranks are stuck in: every party not blocked before issuing it
    arrived = {
        inst: set(ranks)
        for inst, ranks in (
            ops.filter(pl.col("inst").is_in(rows["inst"].unique().implode()))
            .select("inst", "rank", "idx")
            .join(blocked_at, on="rank", how="left")
            .filter(pl.col("b").is_null() | (pl.col("b") >= pl.col("idx")))
            .group_by("inst")
            .agg(pl.col("rank"))
        ).iter_rows()
    }
    unmatched = set(never["inst"].to_list())
    out = {}
    for row in rows.to_dicts():
        r = row["rank"]
        key = WaitKey.of(row, r)
        event = dict(row)
        if row["async_op"] == 1:  # blocked at the wait, like simulate reports it
            event = dict(row, op="wait", idx=row["wait_idx"], ref=row["idx"])
        out[r] = Blocked(
            r,
            event,
            key,
            waits_for(key, arrived.get(row["inst"], set()), members, present),
            row["inst"] not in unmatched,
        )
    return out
