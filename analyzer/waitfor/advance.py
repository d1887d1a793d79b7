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

from collections.abc import Set as AbstractSet

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
    WaitKey,
    comm_patterns,
    group_members,
    waits_for,
)


def advance(trace: Trace, eager_bytes: int = 0, skip_groups: AbstractSet[int] = frozenset()) -> dict[int, Blocked]:
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
        rows = trace.with_codes(trace.stream.select("rank", "idx", "code", pl.col("seq").cast(pl.Int32)), pats)
        key = rows["rank"].to_numpy().astype(np.int64) * (1 << 32) + rows["idx"].to_numpy()
        if len(key) > 1 and not (key[1:] > key[:-1]).all():  # streams are stored in order; be sure
            rows = rows.sort("rank", "idx")
            key = rows["rank"].to_numpy().astype(np.int64) * (1 << 32) + rows["idx"].to_numpy()
        # per-pattern columns gathered by code into lean numpy arrays (82 M rows: bytes count)
        table = trace.patterns.select("code").join(
            pats.select("code", "group", "kind", "async_op", "eager", "peer"),
            on="code",
            how="left",
            maintain_order="left",
        )
        code = rows["code"].to_numpy()
        self.kind = kind = table["kind"].fill_null(-1).to_numpy().astype(np.int8)[code]
        self.rank = rank = rows["rank"].to_numpy()
        self.idx = rows["idx"].to_numpy().astype(np.int32)
        n_ranks = (int(rank.max()) + 1) if len(rank) else 0
        bounds = np.searchsorted(rank, np.arange(n_ranks + 1))
        self.start, self.end = bounds[:-1], bounds[1:]
        group = table["group"].fill_null(-1).to_numpy().astype(np.int32)[code]
        peer = table["peer"].fill_null(-1).to_numpy().astype(np.int32)
        self.inst, self.need = _instances(kind, group, rows["seq"].to_numpy(), rank, peer, code, trace, present)
        del group
        # a wait blocks on its target op's instance; an op blocks on its own unless async or eager
        target = np.full(len(kind), -1, dtype=np.int32)
        is_wait = kind == WAIT
        waits = rows.filter(pl.Series(is_wait))
        ref = trace.with_patterns(waits.select("idx", "code"), "ref", table=pats)["ref"].to_numpy()
        w = np.flatnonzero(is_wait)[ref >= 0]
        wkey = rank[w].astype(np.int64) * (1 << 32) + ref[ref >= 0]
        at = np.minimum(np.searchsorted(key, wkey), len(key) - 1)
        hit = (key[at] == wkey) & (kind[at] != WAIT)
        target[w[hit]] = at[hit]
        del key, waits, ref
        fire = (table["async_op"].fill_null(1).to_numpy() == 0) & ~table["eager"].fill_null(False).to_numpy()
        blocking = (~is_wait) & fire[code]
        target[blocking] = np.flatnonzero(blocking)
        self.target = target  # the op row whose instance a blocking point waits on; -1: not one
        self.bps = np.flatnonzero(target >= 0)

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


def _instances(kind, group, seq, rank, peer_of_code, code, trace: Trace, present: set) -> tuple[np.ndarray, np.ndarray]:
    """A dense id per op: (group, seq) for collectives, (group, src, dst, seq) for p2p (per group
    and per channel offsets: no sort of the events), and what each instance needs to complete."""
    inst = np.full(len(kind), -1, dtype=np.int32)
    members = group_members(trace)
    need = []
    n = 0
    coll = np.flatnonzero(kind == COLLECTIVE)
    if len(coll):
        g, s = group[coll], np.maximum(seq[coll], 0)
        top = pl.DataFrame({"g": g, "s": s}).group_by("g").agg(pl.col("s").max()).sort("g")
        gid, span = top["g"].to_numpy(), top["s"].to_numpy().astype(np.int64) + 1
        offset = np.zeros(int(gid.max()) + 2, dtype=np.int64)
        offset[gid] = np.r_[0, np.cumsum(span)[:-1]]
        inst[coll] = (offset[g] + s).astype(np.int32)
        del g, s
        size = [len([m for m in members.get(int(x), []) if m in present]) for x in gid]
        need.append(np.repeat(np.asarray(size, dtype=np.int32), span))
        n = int(span.sum())
    p2p = np.flatnonzero((kind == SEND) | (kind == RECV))
    if len(p2p):
        w = int(max(trace.world_size, max(present, default=0) + 1)) + 1
        r, peer = rank[p2p].astype(np.int64), peer_of_code[code[p2p]].astype(np.int64)
        send = kind[p2p] == SEND
        src, dst = (np.where(send, r, peer) + 1, np.where(send, peer, r) + 1)  # -1 (any source) -> 0
        chan = (group[p2p].astype(np.int64) + 1) * (w * w) + src * w + dst
        del r, peer, src, dst
        s = np.maximum(seq[p2p], 0)
        top = pl.DataFrame({"c": chan, "s": s}).group_by("c").agg(pl.col("s").max()).sort("c")
        cid, span = top["c"].to_numpy(), top["s"].to_numpy().astype(np.int64) + 1
        offset = n + np.r_[0, np.cumsum(span)[:-1]]
        inst[p2p] = (offset[np.searchsorted(cid, chan)] + s).astype(np.int32)
        need.append(np.full(int(span.sum()), 2, dtype=np.int32))
    return inst, (np.concatenate(need) if need else np.zeros(0, dtype=np.int32))


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
        key = WaitKey.of(op, r)
        i, k = int(s.inst[t]), int(s.kind[t])
        if k == COLLECTIVE:
            matched = len(issued.get(i, ())) >= int(s.need[i])
        else:
            matched = (RECV if k == SEND else SEND) in issued.get(i, ())
        event = {c: row[c] for c in _STREAM_COLUMNS}
        out[r] = Blocked(r, event, key, waits_for(key, arrived.get(i, set()), members, present), matched)
    return out
