"""The dry-run replay, columnar, for every trace: rounds over ranks, not a loop over events.

What it computes is what `waitfor.replay.simulate` computes: the least fixed point of "a rank
gets past a blocking point once the instance it waits on is complete" (a collective: every
present member has entered it; a send: its recv is posted; a recv: its send is posted). Each
rank's stream is cut at its blocking points (a blocking collective or rendezvous send / recv, a
`wait` on an async op -- isend / irecv, batch_isend_irecv, async collectives; never an eager
send). In one round every rank whose current blocking instance is complete moves on to its next
blocking point and posts every op on the way (numpy over the ranks moving, ranges expanded with
`repeat`): so the rounds are as many as the longest chain of blocking points (about the events
per rank, plus the pipeline's fill), each a handful of array operations over at most `ranks`
entries, and every event is posted exactly once. Where rounds stop, the ranks not at their end
are blocked: deadlock cycles included (pipeline traces, whose 1F1B / interleaved schedules
order sends and recvs differently per stage, fail the ordering certificate that `settle` needs).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from analyzer.trace import Trace
from analyzer.waitfor.semantics import (
    _STREAM_COLUMNS,
    COLLECTIVE,
    RECV,
    SEND,
    WAIT,
    Blocked,
    comm_patterns,
    group_members,
    op_key,
    waits_for,
)


def advance(trace: Trace, eager_bytes: int = 0, skip_groups: set[int] = frozenset()) -> dict[int, Blocked]:
    """Ranks left blocked, exactly as `waitfor.replay.simulate` leaves them (any trace)."""
    present = set(trace.ranks)
    s = _Streams(trace, eager_bytes, skip_groups, present)
    cur = s.run()
    stuck = np.flatnonzero(cur < s.end)
    if not len(stuck):
        return {}
    return _blocked(trace, s, cur, stuck, present)


class _Streams:
    """Comm events of every rank, lean numpy columns in stream order, with their instances."""

    def __init__(self, trace: Trace, eager_bytes: int, skip_groups, present: set) -> None:
        pats = (
            comm_patterns(trace)
            .filter(~pl.col("group").is_in(sorted(skip_groups)))
            .with_columns(eager=(pl.col("kind") == SEND) & (pl.col("in_bytes") <= eager_bytes) & (eager_bytes > 0))
        )
        ev = trace.with_patterns(
            trace.with_codes(trace.stream.select("rank", "idx", "code", "seq"), pats),
            "group",
            "kind",
            "async_op",
            "eager",
            "peer",
            table=pats,
        )
        ev = ev.with_columns(pl.col("idx").cast(pl.Int64))
        key = ev["rank"].to_numpy().astype(np.int64) * (1 << 32) + ev["idx"].to_numpy()
        if len(key) > 1 and not (key[1:] > key[:-1]).all():  # streams are stored in order; be sure
            ev = ev.sort("rank", "idx")
            key = ev["rank"].to_numpy().astype(np.int64) * (1 << 32) + ev["idx"].to_numpy()
        self.idx = ev["idx"].to_numpy().astype(np.int32)
        rank = ev["rank"].to_numpy()
        n_ranks = (int(rank.max()) + 1) if len(rank) else 0
        bounds = np.searchsorted(rank, np.arange(n_ranks + 1))
        self.start, self.end = bounds[:-1], bounds[1:]
        kind = ev["kind"].to_numpy()
        self.kind = kind
        inst, self.need = _instances(ev, trace, present)
        # a wait blocks on its target op's instance; an op blocks on its own unless async or eager
        ref = trace.with_patterns(ev.select("idx", "code"), "ref", table=pats)["ref"].to_numpy()
        target = np.full(len(kind), -1, dtype=np.int64)
        is_wait = kind == WAIT
        w = np.flatnonzero(is_wait & (ref >= 0))
        wkey = rank[w].astype(np.int64) * (1 << 32) + ref[w]
        at = np.minimum(np.searchsorted(key, wkey), len(key) - 1)
        hit = (key[at] == wkey) & (kind[at] != WAIT)
        target[w[hit]] = at[hit]
        blocking = (~is_wait) & (ev["async_op"].to_numpy() == 0) & ~ev["eager"].to_numpy()
        target[blocking] = np.flatnonzero(blocking)
        self.target = target.astype(np.int32)  # the op row whose instance a blocking point waits on; -1: not one
        self.inst = inst
        self.bps = np.flatnonzero(target >= 0)
        self.rank = rank

    def run(self) -> np.ndarray:
        kind, inst, need, bps = self.kind, self.inst, self.need, self.bps
        entered = np.zeros(len(need), dtype=np.int32)  # collectives: members in; p2p: bit 1 send, bit 2 recv
        # k[r]: rank r's current blocking point, as an index into bps (a rank's are consecutive)
        k = np.searchsorted(bps, self.start)
        last = np.searchsorted(bps, self.end)  # one past the rank's blocking points
        bps = np.r_[bps, len(kind)]
        cur = np.where(k < last, bps[k], self.end)
        self._post(self.start, np.minimum(cur, self.end - 1), entered)
        # a blocking point is passed when its target's instance is complete: collectives by count,
        # a send when its recv is posted (bit 2), a recv when its send is (bit 1)
        alive = np.flatnonzero(k < last)
        while len(alive):
            t = self.target[cur[alive]]
            tk = kind[t]
            i, w = inst[t], np.where(tk == SEND, 2, np.where(tk == RECV, 1, 0))
            got = entered[i]
            ok = np.where(w == 0, got >= need[i], (got & w) != 0)
            if not ok.any():
                break
            adv = alive[ok]
            k[adv] += 1
            new = np.where(k[adv] < last[adv], bps[k[adv]], self.end[adv])
            self._post(cur[adv] + 1, np.minimum(new, self.end[adv] - 1), entered)
            cur[adv] = new
            alive = alive[k[alive] < last[alive]]
        return cur

    def _post(self, lo: np.ndarray, hi: np.ndarray, entered: np.ndarray) -> None:
        """Every op in rows lo..hi (inclusive, per rank) enters its instance."""
        n = np.maximum(hi - lo + 1, 0)
        total = int(n.sum())
        if not total:
            return
        rows = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(total)
        k = self.kind[rows]
        coll = rows[k == COLLECTIVE]
        np.add.at(entered, self.inst[coll], 1)
        for side, bit in ((SEND, 1), (RECV, 2)):
            p = self.inst[rows[k == side]]
            entered[p] |= bit  # idempotent: a repeated key is posted once, as in the replay


def _instances(ev: pl.DataFrame, trace: Trace, present: set) -> tuple[np.ndarray, np.ndarray]:
    """A dense id per op: (group, seq) for collectives, (group, src, dst, seq) for p2p (per
    channel offsets: no sort of the events), and what each instance needs to complete."""
    kind = ev["kind"].to_numpy()
    seq = np.maximum(ev["seq"].to_numpy().astype(np.int64), 0)
    group = ev["group"].to_numpy().astype(np.int64)
    inst = np.full(len(kind), -1, dtype=np.int64)
    coll = kind == COLLECTIVE
    members = group_members(trace)
    need = []
    n = 0
    if coll.any():
        g = group[coll]
        top = pl.DataFrame({"g": g, "s": seq[coll]}).group_by("g").agg(pl.col("s").max()).sort("g")
        gid, span = top["g"].to_numpy(), top["s"].to_numpy() + 1
        offset = np.r_[0, np.cumsum(span)[:-1]]
        at = np.searchsorted(gid, g)
        inst[coll] = offset[at] + seq[coll]
        size = [len([m for m in members.get(int(x), []) if m in present]) for x in gid]
        need.append(np.repeat(np.asarray(size, dtype=np.int32), span))
        n = int(span.sum())
    p2p = (kind == SEND) | (kind == RECV)
    if p2p.any():
        w = int(max(trace.world_size, max(present, default=0) + 1)) + 1
        rank = ev["rank"].to_numpy().astype(np.int64)[p2p]
        peer = ev["peer"].to_numpy().astype(np.int64)[p2p]
        send = kind[p2p] == SEND
        src, dst = (np.where(send, rank, peer) + 1, np.where(send, peer, rank) + 1)  # -1 (any source) -> 0
        chan = (group[p2p] + 1) * (w * w) + src * w + dst
        top = pl.DataFrame({"c": chan, "s": seq[p2p]}).group_by("c").agg(pl.col("s").max()).sort("c")
        cid, span = top["c"].to_numpy(), top["s"].to_numpy() + 1
        offset = n + np.r_[0, np.cumsum(span)[:-1]]
        inst[p2p] = offset[np.searchsorted(cid, chan)] + seq[p2p]
        need.append(np.full(int(span.sum()), 2, dtype=np.int32))
    return inst.astype(np.int32), (np.concatenate(need) if need else np.zeros(0, dtype=np.int32))


def _rows(trace: Trace, ranks: np.ndarray, idx: np.ndarray) -> pl.DataFrame:
    """The events (rank, idx) with the replay's columns, in the order given: a semi join on the
    lean stream, then the pattern columns for those rows only."""
    want = pl.DataFrame({"rank": ranks.astype(np.int32), "idx": idx.astype(np.int32)})
    got = trace.stream.select("rank", "idx", "code", "seq", "step").join(want, on=["rank", "idx"], how="semi")
    cols = [c for c in _STREAM_COLUMNS if c not in got.columns]
    got = trace.with_patterns(got, *cols).with_columns(op=pl.col("op").cast(pl.String)).select(_STREAM_COLUMNS)
    return want.join(got, on=["rank", "idx"], how="left", maintain_order="left")


def _blocked(trace: Trace, s: _Streams, cur: np.ndarray, stuck: np.ndarray, present: set) -> dict[int, Blocked]:
    members = group_members(trace)
    at, target = cur[stuck], s.target[cur[stuck]]
    idx = s.idx
    rows = _rows(trace, stuck, idx[at]).with_columns(tidx=pl.Series(idx[target].astype(np.int32)))
    op_of = {(r["rank"], r["idx"]): r for r in _rows(trace, stuck, idx[target]).to_dicts()}
    # who entered the collectives ranks are stuck in, and whether every party issues each key
    insts = np.unique(s.inst[target])
    hit = np.flatnonzero(np.isin(s.inst, insts))
    hit = hit[s.kind[hit] != WAIT]
    posted = hit <= cur[s.rank[hit]]
    arrived: dict[int, set] = {}
    issued: dict[int, set] = {}
    for i, r, p, k in zip(s.inst[hit].tolist(), s.rank[hit].tolist(), posted.tolist(), s.kind[hit].tolist()):
        issued.setdefault(i, set()).add(r if k == COLLECTIVE else k)
        if p:
            arrived.setdefault(i, set()).add(r)
    out = {}
    for row, t in zip(rows.to_dicts(), target.tolist()):
        r = row["rank"]
        op = op_of[(r, row["tidx"])]
        key = op_key(op, r)
        i, k = int(s.inst[t]), int(s.kind[t])
        if k == COLLECTIVE:
            matched = len(issued.get(i, ())) >= int(s.need[i])
        else:
            matched = (RECV if k == SEND else SEND) in issued.get(i, ())
        event = {c: row[c] for c in _STREAM_COLUMNS}
        out[r] = Blocked(r, event, key, waits_for(key, arrived.get(i, set()), members, present), matched)
    return out
