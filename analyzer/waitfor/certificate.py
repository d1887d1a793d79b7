"""The ordering certificate: a columnar proof that no ordering deadlock exists in a dry run
(then settle.py replaces the Python replay)."""

from __future__ import annotations

import numpy as np
import polars as pl

from analyzer.model.trace import Trace
from analyzer.waitfor.semantics import COLLECTIVE, RECV, SEND, WAIT, comm_patterns


def ordered(trace: Trace) -> bool:
    """A columnar certificate that no ordering deadlock exists: give each collective / p2p
    instance a number T; if T grows strictly along every rank's stream, processing instances in
    T order completes them all, so no cycle of waits can form (any T will do; a cycle would
    contradict it). T = a position at which its parties issue it (the earliest for collectives,
    the median for p2p pairs). A rank that skipped or added a collective on some group (the
    collectives check's `missing_collective`) has all its later positions shifted, on every
    group, so it is left out. SPMD traces pass at once; when it fails, `advance` decides. One
    window over the events, no sort."""
    pats = comm_patterns(trace).filter((pl.col("kind") != WAIT) & (pl.col("group") >= 0))
    if pats.is_empty():
        return True
    ev = trace.with_patterns(
        trace.with_codes(trace.stream.select("rank", "code", "seq"), pats), "group", "kind", table=pats
    )
    ev = ev.with_columns(pos=_position_in_rank(ev["rank"]))
    coll = pl.col("kind") == COLLECTIVE  # p2p rows are always kept: pairs legitimately differ in counts
    counts = ev.filter(coll).group_by("group", "rank").agg(n=pl.len())
    usual = counts.group_by("group").agg(usual=pl.col("n").mode().first())
    odd = counts.join(usual, on="group").filter(pl.col("n") != pl.col("usual")).select("rank").unique()
    if odd.height:  # its positions are shifted on every group: leave the rank out altogether
        ev = ev.join(odd, on="rank", how="anti", maintain_order="left")
    if ev.filter(~coll).height:  # p2p: instance (group, seq, src, dst), T = median position
        peer = trace.with_patterns(ev.select("code"), "peer", table=pats)["peer"]
        ev = ev.with_columns(
            a=pl.when(pl.col("kind") == SEND).then("rank").when(pl.col("kind") == RECV).then(peer).otherwise(-1),
            b=pl.when(pl.col("kind") == SEND).then(peer).when(pl.col("kind") == RECV).then("rank").otherwise(-1),
        )
        t = ev.select(pl.col("pos").median().over("group", "seq", "a", "b"))
    else:  # collectives only: one int64 key (group, seq), T = earliest position
        key = (pl.col("group").cast(pl.Int64) * (1 << 40) + pl.col("seq")).alias("key")
        t = ev.select(pl.col("pos").min().over(key))
    t_arr = t.to_series().to_numpy()
    rank = ev["rank"].to_numpy()
    same = rank[1:] == rank[:-1]
    return bool((t_arr[1:][same] > t_arr[:-1][same]).all())


def _position_in_rank(rank: pl.Series) -> pl.Series:
    """0, 1, 2, ... within each rank of a frame sorted by rank (numpy; no window)."""
    r = rank.to_numpy()
    starts = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1]
    first = np.zeros(len(r), dtype=np.int64)
    first[starts[1:]] = np.diff(starts)
    return pl.Series("pos", np.arange(len(r), dtype=np.int64) - np.cumsum(first))
