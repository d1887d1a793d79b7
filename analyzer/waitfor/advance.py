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

from analyzer.model.trace import Trace
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
        per_code: dict[str, np.ndarray] = {
            "kind": table["kind"].fill_null(-1).to_numpy().astype(np.int8),
            "group": table["group"].fill_null(-1).to_numpy().astype(np.int32),
            "peer": table["peer"].fill_null(-1).to_numpy().astype(np.int32),
        }
        self.kind = kind = per_code["kind"][code]
        self.rank = rank = rows["rank"].to_numpy()
        self.idx = rows["idx"].to_numpy().astype(np.int32)
        n_ranks = (int(rank.max()) + 1) if len(rank) else 0
        bounds = np.searchsorted(rank, np.arange(n_ranks + 1))
        self.start, self.end = bounds[:-1], bounds[1:]
        self.inst, self.need = _instances(kind, rows["seq"].to_numpy(), rank, code, per_code, trace, present)
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
        kind, bps, end = self.kind, self.bps, self.end
        entered = np.zeros(len(self.need), dtype=np.int32)  # collectives: members in; p2p: bit 1 send, bit 2 recv
        # per blocking point, what a round reads (one gather each, no trip through the rows): its
        # instance, the bit it waits for (send: the recv's, 2; recv: 1; collective: 0, by count),
        # what the count must reach, and the rows it posts once passed (up to the next one)
        t = self.target[bps]
        b_inst = self.inst[t]
        b_bit = np.where(kind[t] == SEND, 2, np.where(kind[t] == RECV, 1, 0)).astype(np.int32)
        b_need = np.where(b_bit == 0, self.need[b_inst], 0).astype(np.int32)
        del t
        # k[r]: rank r's current blocking point, as an index into bps (a rank's are consecutive)
        k = np.searchsorted(bps, self.start)
        last = np.searchsorted(bps, end)  # one past the rank's blocking points
        post_hi = np.empty_like(bps)
        post_hi[:-1] = bps[1:]
        tail = np.zeros(len(bps), dtype=bool)  # a rank's last blocking point: posts to its end
        tail[last[last > k] - 1] = True
        post_hi[tail] = end[self.rank[bps[tail]]] - 1
        del tail
        self._post(self.start, np.minimum(self._at(k, last), end - 1), entered)
        # a blocking point is passed when its instance is complete: collectives by count, a send
        # when its recv is posted (bit 2), a recv when its send is (bit 1)
        alive = np.flatnonzero(k < last)
        while len(alive):
            j = k[alive]
            got = entered[b_inst[j]]
            w = b_bit[j]
            ok = np.where(w == 0, got >= b_need[j], (got & w) != 0)
            if not ok.any():
                break
            j = j[ok]
            k[alive[ok]] += 1
            self._post(bps[j] + 1, post_hi[j], entered)
            done = j + 1 >= last[alive[ok]]
            if done.any():
                alive = alive[k[alive] < last[alive]]
        return self._at(k, last)

    def _at(self, k: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Each rank's row: its blocking point k, or its end when past its last one."""
        if not len(self.bps):
            return self.end.copy()
        return np.where(k < last, self.bps[np.minimum(k, len(self.bps) - 1)], self.end)

    def _post(self, lo: np.ndarray, hi: np.ndarray, entered: np.ndarray) -> None:
        """Every op in rows lo..hi (inclusive, per rank) enters its instance."""
        n = np.maximum(hi - lo + 1, 0)
        if (n == 1).all():  # the usual round: each rank posts just its next blocking op
            rows = lo
        else:
            total = int(n.sum())
            if not total:
                return
            rows = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(total)
        k = self.kind[rows]
        i = self.inst[rows]
        coll = k == COLLECTIVE
        np.add.at(entered, i[coll], np.int32(1))  # a numpy scalar: ufunc.at's fast path
        p2p = (k == SEND) | (k == RECV)
        # or-ed at: a send and its recv posted in one round set both bits (a repeated key once)
        np.bitwise_or.at(entered, i[p2p], np.where(k[p2p] == SEND, 1, 2).astype(np.int32))


def _instances(kind, seq, rank, code, per_code: dict, trace: Trace, present: set) -> tuple[np.ndarray, np.ndarray]:
    """A dense id per op: (group, seq) for collectives, (group, src, dst, seq) for p2p -- a
    channel per group / per (group, src, dst), numbered sequentially, then the seq within it (no
    sort of the events) -- and what each instance needs to complete."""
    inst = np.full(len(kind), -1, dtype=np.int32)
    is_op = kind != WAIT
    ops = slice(None) if is_op.all() else np.flatnonzero(is_op)  # a pipeline of blocking p2p: no waits
    del is_op
    if not len(kind[ops]):
        return inst, np.zeros(0, dtype=np.int32)
    chan, chan_group, chan_coll = _channels(kind[ops], rank[ops], code[ops], per_code, trace)
    s = np.maximum(seq[ops], 0).astype(np.int64)
    span = np.zeros(len(chan_group), dtype=np.int64)
    np.maximum.at(span, chan, s + 1)
    offset = np.r_[0, np.cumsum(span)[:-1]]
    inst[ops] = (offset[chan] + s).astype(np.int32)
    size = {g: len([m for m in ms if m in present]) for g, ms in group_members(trace).items()}
    need = np.array([size.get(int(g), 0) for g in chan_group], dtype=np.int32)
    need = np.where(chan_coll, need, 2).astype(np.int32)
    return inst, np.repeat(need, span)


def _channels(kind, rank, code, per_code: dict, trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each op's channel, dense: its group for a collective, (group, src, dst) for a send / recv
    (-1, any source, kept as such); with each channel's group and whether it is a collective.
    Keyed per pattern code where every code belongs to one rank (a loaded trace: per-rank pattern
    tables), so the key is built over the patterns, not the events; else per event. `per_code`:
    kind, group, peer per pattern code (-1 where not an op)."""
    code_rank = trace.patterns["rank"].to_numpy()
    by_code = len(code_rank) == len(per_code["kind"]) and bool((code_rank[code] == rank).all())
    if by_code:
        used = np.flatnonzero((per_code["kind"] >= 0) & (per_code["kind"] != WAIT))  # the codes of ops
        k, g = per_code["kind"][used], per_code["group"][used]
        r, peer = code_rank[used].astype(np.int64), per_code["peer"][used].astype(np.int64)
    else:
        k, g, r, peer = kind, per_code["group"][code], rank.astype(np.int64), per_code["peer"][code].astype(np.int64)
    coll = k == COLLECTIVE
    src = np.where(coll, -2, np.where(k == SEND, r, peer))
    dst = np.where(coll, -2, np.where(k == SEND, peer, r))
    keys = pl.DataFrame({"g": g, "src": src, "dst": dst})
    dense = keys.select(pl.struct("g", "src", "dst").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    n_chan = int(dense.max()) + 1 if len(dense) else 0
    chan_group = np.zeros(n_chan, dtype=np.int32)
    chan_coll = np.zeros(n_chan, dtype=bool)
    chan_group[dense] = g
    chan_coll[dense] = coll
    if not by_code:
        return dense, chan_group, chan_coll
    of_code = np.full(len(per_code["kind"]), -1, dtype=np.int64)
    of_code[used] = dense
    return of_code[code], chan_group, chan_coll


def _rows(trace: Trace, ranks: np.ndarray, idx: np.ndarray) -> pl.DataFrame:
    """The events (rank, idx) with the replay's columns, in the order given: a gather of those
    rows of the stream (stored by rank, idx dense from 0 in each rank; checked, else a semi
    join), then the pattern columns for those rows only."""
    want = pl.DataFrame({"rank": ranks.astype(np.int32), "idx": idx.astype(np.int32)})
    stream = trace.stream.select("rank", "idx", "code", "seq", "step")
    rank_col = stream["rank"].to_numpy()
    at = np.searchsorted(rank_col, ranks).astype(np.int64) + idx
    at = np.minimum(at, max(stream.height - 1, 0))
    got = stream[pl.Series(at)] if stream.height else stream
    if not (got["rank"].to_numpy() == ranks).all() or not (got["idx"].to_numpy() == idx).all():
        got = stream.join(want, on=["rank", "idx"], how="semi")
        got = want.join(got, on=["rank", "idx"], how="left", maintain_order="left")
    cols = [c for c in _STREAM_COLUMNS if c not in got.columns]
    return trace.with_patterns(got, *cols).with_columns(op=pl.col("op").cast(pl.String)).select(_STREAM_COLUMNS)


def _blocked(trace: Trace, s: _Streams, cur: np.ndarray, stuck: np.ndarray, present: set) -> dict[int, Blocked]:
    members = group_members(trace)
    at, target = cur[stuck], s.target[cur[stuck]]
    idx = s.idx
    rows = _rows(trace, stuck, idx[at]).with_columns(tidx=pl.Series(idx[target].astype(np.int32)))
    op_of = {(r["rank"], r["idx"]): r for r in _rows(trace, stuck, idx[target]).to_dicts()}
    # who entered the collectives ranks are stuck in, and whether every party issues each key
    mark = np.zeros(len(s.need) + 1, dtype=bool)  # a mask gathered by instance: no isin over every event
    mark[s.inst[target]] = True
    hit = np.flatnonzero(mark[s.inst])  # inst -1 (not an op) reads the spare last entry
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
