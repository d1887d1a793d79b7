"""Post-mortem blocking points, columnar: where each rank of a stopped run (FR dumps, a killed
recording or replay) was stuck, under the blocking semantics of semantics.py."""

from __future__ import annotations

import polars as pl

from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import (
    COLLECTIVE,
    RECV,
    SEND,
    Blocked,
    WaitKey,
    comm_patterns,
    group_members,
    waits_for,
    with_waits,
)
from traceformat.ops import COLLECTIVE_OPS


def frontier(trace: Trace) -> dict[int, Blocked]:
    """Post-mortem blocking points, columnar: where each stream ends at the op its rank was stuck
    in (Flight Recorder dumps, a recording or replay killed while hanging), a rank is blocked in
    its first op that cannot complete: a collective some member never entered, a send / recv
    without its partner (at the op, or at its wait when async). Graph work happens only for the
    ranks found stuck.

    Flight Recorder dumps carry each entry's state, so there completion is taken from evidence
    only: an instance counts as completed when every member that left a dump holds it and FR
    says completed (gloo's pg_status also counts work that ended in a timeout error, so a status
    alone never hides an instance some member never entered). An instance every member issued
    but none completed (NCCL `started` / `scheduled`: two groups entered in opposite orders) is
    stuck too; a member has arrived at it only when it is not blocked at an earlier op of its own
    stream, so the per-rank order shows the cross-group cycle."""
    # a member with no stream at all (a dump never written: the process died) is waited on too
    members = group_members(trace)
    present = set(trace.ranks) | {m for ms in members.values() for m in ms}
    fr_state = trace.has("state")  # Flight Recorder knows which entries completed
    pats = comm_patterns(trace)
    # lean rows (82 M of them at scale); every other column only for the rows found stuck
    ev = trace.with_patterns(
        trace.with_codes(
            trace.stream.select("rank", "idx", "code", "seq", "step", *(["state"] if fr_state else [])), pats
        ),
        "group",
        "kind",
        table=pats,
    )
    size = pl.DataFrame(
        {"group": list(members), "size": [len(ms) for ms in members.values()]},
        schema={"group": pl.Int32, "size": pl.Int64},
    )
    coll = ev.filter(pl.col("kind") == COLLECTIVE)
    # a ring buffer (FR) forgets old entries: ignore instances older than every member's oldest
    horizon = (
        coll.group_by("group", "rank")
        .agg(first=pl.col("seq").min())
        .group_by("group")
        .agg(horizon=pl.col("first").max())
    )
    if fr_state:  # completed on evidence: every member with a dump holds it, and FR says so
        dumped = set(trace.ranks)
        size = size.with_columns(
            size=pl.Series([sum(m in dumped for m in ms) for ms in members.values()], dtype=pl.Int64)
        )
        done = (pl.col("n") >= pl.col("size")) & pl.col("completed")
    else:
        done = pl.col("n") >= pl.col("size")
    completed = (pl.col("state") == "completed").any() if fr_state else pl.lit(False)
    inst = (
        coll.group_by("group", "seq")
        .agg(n=pl.len(), completed=completed)
        .join(size, on="group")
        .join(horizon, on="group")
        .filter((pl.col("seq") >= pl.col("horizon")) & ~done)
    )
    lean = ["rank", "idx", "code", "seq", "step"]
    stuck_coll = coll.join(inst.select("group", "seq"), on=["group", "seq"]).select(lean)
    p2p = trace.with_patterns(ev.filter(pl.col("kind").is_in([SEND, RECV])), "peer", table=pats)
    sends = p2p.filter(pl.col("kind") == SEND).with_columns(src=pl.col("rank"), dst=pl.col("peer"))
    recvs = p2p.filter(pl.col("kind") == RECV).with_columns(src=pl.col("peer"), dst=pl.col("rank"))
    keys = ["group", "src", "dst", "seq"]
    stuck_p2p = pl.concat(
        [sends.join(recvs.select(keys), on=keys, how="anti"), recvs.join(sends.select(keys), on=keys, how="anti")]
    ).select(lean)
    if fr_state:  # a matched send / recv that neither side completed is stuck on both sides
        pending = pl.concat([sends, recvs]).group_by(keys).agg(pl.col("state").eq("completed").any().alias("ok"))
        open_ = pending.filter(~pl.col("ok")).select(keys)
        stuck_p2p = pl.concat(
            [
                stuck_p2p,
                sends.join(open_, on=keys).join(recvs.select(keys), on=keys).select(lean),
                recvs.join(open_, on=keys).join(sends.select(keys), on=keys).select(lean),
            ]
        ).unique()
    stuck = trace.with_patterns(
        pl.concat([stuck_coll, stuck_p2p]),
        "op",
        "group",
        "peer",
        "async_op",
        "ref",
        "in_bytes",
        "frame",
        "module",
        "phase",
        table=pats,
    )
    candidates = (
        with_waits(trace, stuck, ev, pats)
        .with_columns(block=pl.when(pl.col("async_op") == 1).then("wait_idx").otherwise("idx"))
        .filter(pl.col("block").is_not_null())
        .sort("rank", "block")
    )
    while True:
        out, in_flight = _blocked_at(candidates.group_by("rank", maintain_order=True).first(), coll, members, present)
        if not fr_state or in_flight.is_empty():
            return out
        # a rank whose first open op is in flight (every member in it, none completed) went on
        # past it (FR: async work, or gloo's entries that are never updated): it is blocked at
        # its next open op, if any -- the collective after it that a member skipped
        candidates = candidates.join(in_flight, on=["rank", "idx"], how="anti")


def _blocked_at(stuck: pl.DataFrame, coll: pl.DataFrame, members: dict, present: set) -> tuple[dict, pl.DataFrame]:
    """(rank -> Blocked at its first open op, the (rank, idx) of those ops that are in flight: an
    FR collective every member is in and none completed, where no rank waits on another)."""
    fr_state = "state" in coll.columns
    flying: list[tuple[int, int]] = []
    if stuck.is_empty():
        return {}, pl.DataFrame(flying, schema={"rank": pl.Int32, "idx": pl.Int64}, orient="row")
    arrived_rows = coll.join(
        stuck.filter(pl.col("op").is_in(sorted(COLLECTIVE_OPS))).select("group", "seq").unique(), on=["group", "seq"]
    )
    if fr_state:  # arrived: holds the instance at or before the op its rank is blocked at
        block = stuck.select("rank", at="block")
        arrived_rows = arrived_rows.join(block, on="rank", how="left").filter(
            pl.col("at").is_null() | (pl.col("idx") <= pl.col("at"))
        )
    arrived = {(g, s): set(rs) for g, s, rs in arrived_rows.group_by("group", "seq").agg(pl.col("rank")).iter_rows()}
    out = {}
    waited: dict[tuple, list[int]] = {}  # (group, seq) -> members not arrived: the same for all in it
    for row in stuck.to_dicts():
        key = WaitKey.of(row, row["rank"])
        if key.collective:
            at = (row["group"], row["seq"])
            if at not in waited:
                waited[at] = waits_for(key, arrived.get(at, set()), members, present)
            waiting = list(waited[at])
        else:
            waiting = waits_for(key, set(), members, present)
        if fr_state and key.collective and not waiting:
            # every member is in it and none completed it: in flight when the dumps were taken
            # (or stuck inside the backend), no rank waits on another -- not a blocking point
            flying.append((row["rank"], row["idx"]))
            continue
        out[row["rank"]] = Blocked(row["rank"], row, key, waiting)
    return out, pl.DataFrame(flying, schema={"rank": pl.Int32, "idx": pl.Int64}, orient="row")
