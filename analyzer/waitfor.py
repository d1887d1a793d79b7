"""Blocking semantics and wait-for graphs, shared by the ordering check and `analyzer hang`.

Semantics (documented in README, "Deadlocks and hangs"):
- a collective completes when every member of its group (that has a stream) has entered it,
  matched by the per-group sequence number;
- a blocking send / recv is a rendezvous: it completes when the peer has posted the matching
  recv / send (NCCL-like). With `eager_bytes`, a blocking send of at most that many bytes
  completes at once (the eager protocol of small messages);
- an async op (async_op=True, isend/irecv, batch_isend_irecv, functional collectives) does not
  block where it is issued but at its `wait`.
A rank blocked in a collective waits for every member that has not arrived (MUST's AND arcs);
a deadlock is a cycle of such waits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import polars as pl

from analyzer.load import Trace
from tracer.format import COLLECTIVE_OPS

COMM = sorted(COLLECTIVE_OPS | {"send", "recv", "wait"})
_STREAM_COLUMNS = ("rank", "idx", "op", "group", "seq", "peer", "async_op", "ref", "in_bytes", "frame", "module",
                   "phase", "step")
COLLECTIVE, SEND, RECV, WAIT = 0, 1, 2, 3
_KIND = {"send": SEND, "recv": RECV, "wait": WAIT}  # anything else in COMM is a collective
DRY_RUN_MODES = ("fake", "local")  # recordings that never block; anything else is post-mortem


def post_mortem(trace: Trace) -> bool:
    """Each stream ends where its rank was stuck (FR dumps, a replay, a killed real run)."""
    return trace.header.get("mode") not in DRY_RUN_MODES


@dataclass
class Blocked:
    """Where one rank is stuck: the event it blocks in and the key it waits for."""

    rank: int
    event: dict
    key: tuple
    waits_for: list[int] = field(default_factory=list)
    matched: bool = True
    """Whether every party of `key` issues it somewhere in the trace (False: the wait can never
    end whatever the order -- a missing collective or unmatched p2p, not an ordering problem)."""


def comm_streams(trace: Trace, skip_groups: set[int] = frozenset()) -> dict[int, list[dict]]:
    """Per rank, its collectives, p2p ops and waits in program order (small traces: dicts)."""
    ev = (trace.select(*_STREAM_COLUMNS, ops=COMM).with_columns(op=pl.col("op").cast(pl.String))
          .filter(~pl.col("group").is_in(sorted(skip_groups))))
    out: dict[int, list[dict]] = {r: [] for r in trace.ranks}
    for row in ev.iter_rows(named=True):
        out[row["rank"]].append(row)
    return out


def op_key(ev: dict, rank: int) -> tuple:
    if ev["op"] == "send":
        return ("s", ev["group"], rank, ev["peer"], ev["seq"])
    if ev["op"] == "recv":
        return ("r", ev["group"], ev["peer"], rank, ev["seq"])
    return ("c", ev["group"], ev["seq"])


REPLAY_LIMIT = 20_000_000
"""Comm events the step-by-step Python replay takes on (a dict per event: ~24 GB at 82 M)."""


class ReplayTooLarge(ValueError):
    """The ordering certificate failed on a trace too large for the Python replay (one line)."""


def simulate(trace: Trace, eager_bytes: int = 0, skip_groups: set[int] = frozenset()) -> dict[int, Blocked]:
    """Replay every rank's stream under blocking semantics; returns the ranks left blocked."""
    n = trace.select("rank", ops=COMM).height
    if n > REPLAY_LIMIT:
        raise ReplayTooLarge(
            f"{n:,} comm events do not pass the columnar ordering certificate, and the step-by-step "
            f"replay stops at {REPLAY_LIMIT:,}: record fewer ranks (--ranks) or steps to check the ordering")
    streams = comm_streams(trace, skip_groups)
    present = set(trace.ranks)
    size = {g["gid"]: len([r for r in g["ranks"] if r in present]) for g in trace.groups.iter_rows(named=True)}
    by_idx = {r: {e["idx"]: e for e in s} for r, s in streams.items()}
    arrived: dict[tuple, set] = {}
    posted: set[tuple] = set()
    waiters: dict[tuple, list[int]] = {}
    pc = {r: 0 for r in streams}
    entered = {r: -1 for r in streams}  # pc whose arrival / post is already counted
    blocked: dict[int, tuple[dict, tuple]] = {}
    ready = deque(streams)

    def done(key: tuple) -> bool:
        if key[0] == "c":
            return len(arrived.get(key, ())) >= size.get(key[1], 0)
        partner = ("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:]
        return partner in posted

    def wake(key: tuple) -> None:
        for r in waiters.pop(key, []):
            blocked.pop(r, None)
            ready.append(r)

    while ready:
        r = ready.popleft()
        stream = streams[r]
        while pc[r] < len(stream):
            ev = stream[pc[r]]
            if ev["op"] == "wait":
                target = by_idx[r].get(ev["ref"])
                key = op_key(target, r) if target is not None else None
            else:
                key = op_key(ev, r)
                if entered[r] != pc[r]:
                    entered[r] = pc[r]
                    if key[0] == "c":
                        arrived.setdefault(key, set()).add(r)
                        if done(key):
                            wake(key)
                    else:
                        posted.add(key)
                        wake(("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:])
                if ev["async_op"]:
                    pc[r] += 1
                    continue
                if key[0] == "s" and eager_bytes and ev["in_bytes"] <= eager_bytes:
                    pc[r] += 1
                    continue
            if key is None or done(key):
                pc[r] += 1
                continue
            blocked[r] = (ev, key)
            waiters.setdefault(key, []).append(r)
            break
    members = group_members(trace)
    issued: dict[tuple, int] = {}
    for r, stream in streams.items():
        for ev in stream:
            if ev["op"] != "wait":
                k = op_key(ev, r)
                issued[k] = issued.get(k, 0) + 1

    def matched(key: tuple) -> bool:
        if key[0] == "c":
            return issued.get(key, 0) >= size.get(key[1], 0)
        return (("r",) + key[1:] if key[0] == "s" else ("s",) + key[1:]) in issued

    return {r: Blocked(r, ev, key, waits_for(key, arrived.get(key, ()), members, present), matched(key))
            for r, (ev, key) in blocked.items()}


def comm_patterns(trace: Trace) -> pl.DataFrame:
    """The patterns of collectives, p2p ops and waits, op as text, with their `kind`
    (COLLECTIVE, SEND, RECV, WAIT): what the columnar passes below filter events by."""
    return (trace.patterns.with_columns(op=pl.col("op").cast(pl.String)).filter(pl.col("op").is_in(COMM))
            .with_columns(kind=pl.col("op").replace_strict(_KIND, default=COLLECTIVE, return_dtype=pl.Int8)))


def group_members(trace: Trace) -> dict[int, list[int]]:
    return {g: list(m) for g, m in trace.groups.select("gid", "ranks").iter_rows()}


def waits_for(key: tuple, arrived, members: dict[int, list[int]], present: set) -> list[int]:
    """Whom a rank blocked on `key` waits for: every member not arrived (AND arcs), or the peer."""
    if key[0] == "c":
        return [m for m in members.get(key[1], []) if m in present and m not in arrived]
    return [key[3] if key[0] == "s" else key[2]]


def wait_graph(blocked: dict[int, Blocked]) -> nx.DiGraph:
    g = nx.DiGraph()
    for b in blocked.values():
        g.add_node(b.rank)
        for m in b.waits_for:
            g.add_edge(b.rank, m)
    return g


def cycles(g: nx.DiGraph) -> list[list[int]]:
    """Each strongly connected set of waiting ranks (a deadlock), as one concrete cycle first."""
    out = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) < 2:
            continue
        cycle = [u for u, _ in nx.find_cycle(g.subgraph(scc))]
        out.append(cycle + sorted(scc - set(cycle)))
    return sorted(out, key=min)


def to_dot(g: nx.DiGraph, blocked: dict[int, Blocked], labels: dict[int, str], on_cycle: set[int]) -> str:
    """The wait-for graph in DOT: an edge r -> m reads "r waits for m"."""
    lines = ["digraph waitfor {", '  rankdir=LR; node [shape=box, fontname="monospace"];']
    for n in sorted(g.nodes):
        b = blocked.get(n)
        text = f"rank {n}\\n" + (labels.get(n, "") if b else "not blocked in a recorded op")
        style = ', color=red, penwidth=2' if n in on_cycle else (', style=dashed' if not b else '')
        lines.append(f'  r{n} [label="{text}"{style}];')
    for u, v in sorted(g.edges):
        lines.append(f"  r{u} -> r{v}{' [color=red]' if u in on_cycle and v in on_cycle else ''};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def frontier(trace: Trace) -> dict[int, Blocked]:
    """Post-mortem blocking points, columnar: where each stream ends at the op its rank was stuck
    in (Flight Recorder dumps, a recording or replay killed while hanging), a rank is blocked in
    its first op that cannot complete: a collective some member never entered, a send / recv
    without its partner (at the op, or at its wait when async). Graph work happens only for the
    ranks found stuck."""
    # a member with no stream at all (a dump never written: the process died) is waited on too
    members = group_members(trace)
    present = set(trace.ranks) | {m for ms in members.values() for m in ms}
    fr_state = "state" in trace.stream.columns  # Flight Recorder knows which entries completed
    pats = comm_patterns(trace)
    # lean rows (82 M of them at scale); every other column only for the rows found stuck
    ev = trace.with_patterns(trace.with_codes(trace.stream.select("rank", "idx", "code", "seq", "step",
                                                                  *(["state"] if fr_state else [])), pats),
                             "group", "kind", table=pats)
    size = pl.DataFrame({"group": list(members), "size": [len(ms) for ms in members.values()]},
                        schema={"group": pl.Int32, "size": pl.Int64})
    coll = ev.filter(pl.col("kind") == COLLECTIVE)
    # a ring buffer (FR) forgets old entries: ignore instances older than every member's oldest
    horizon = coll.group_by("group", "rank").agg(first=pl.col("seq").min()).group_by("group").agg(
        horizon=pl.col("first").max())
    done = (pl.col("state") == "completed").any() if fr_state else pl.lit(False)
    inst = (coll.group_by("group", "seq").agg(n=pl.len(), done=done).join(size, on="group")
            .join(horizon, on="group")
            .filter((pl.col("n") < pl.col("size")) & (pl.col("seq") >= pl.col("horizon")) & ~pl.col("done")))
    lean = ["rank", "idx", "code", "seq", "step"]
    stuck_coll = coll.join(inst.select("group", "seq"), on=["group", "seq"]).select(lean)
    p2p = trace.with_patterns(ev.filter(pl.col("kind").is_in([SEND, RECV])), "peer", table=pats)
    sends = p2p.filter(pl.col("kind") == SEND).with_columns(src=pl.col("rank"), dst=pl.col("peer"))
    recvs = p2p.filter(pl.col("kind") == RECV).with_columns(src=pl.col("peer"), dst=pl.col("rank"))
    keys = ["group", "src", "dst", "seq"]
    stuck_p2p = pl.concat([sends.join(recvs.select(keys), on=keys, how="anti"),
                           recvs.join(sends.select(keys), on=keys, how="anti")]).select(lean)
    stuck = trace.with_patterns(pl.concat([stuck_coll, stuck_p2p]), "op", "group", "peer", "async_op", "ref",
                                "in_bytes", "frame", "module", "phase", table=pats)
    waits = trace.with_patterns(ev.filter(pl.col("kind") == WAIT).select("rank", "idx", "code"), "ref",
                                table=pats).select("rank", ref="ref", wait_idx="idx")
    stuck = (stuck.join(waits, left_on=["rank", "idx"], right_on=["rank", "ref"], how="left")
             .with_columns(block=pl.when(pl.col("async_op") == 1).then("wait_idx").otherwise("idx"))
             .filter(pl.col("block").is_not_null())
             .sort("rank", "block").group_by("rank", maintain_order=True).first())
    if stuck.is_empty():
        return {}
    arrived_rows = coll.join(stuck.filter(pl.col("op").is_in(sorted(COLLECTIVE_OPS))).select("group", "seq").unique(),
                             on=["group", "seq"])
    arrived = {(g, s): set(rs) for g, s, rs in arrived_rows.group_by("group", "seq").agg(pl.col("rank")).iter_rows()}
    out = {}
    for row in stuck.to_dicts():
        key = op_key(row, row["rank"])
        got = arrived.get((row["group"], row["seq"]), set()) if key[0] == "c" else set()
        out[row["rank"]] = Blocked(row["rank"], row, key, waits_for(key, got, members, present))
    return out


def ordered(trace: Trace) -> bool:
    """A columnar certificate that no ordering deadlock exists: give each collective / p2p
    instance a number T; if T grows strictly along every rank's stream, processing instances in
    T order completes them all, so no cycle of waits can form (any T will do; a cycle would
    contradict it). T = a position at which its parties issue it (the earliest for collectives,
    the median for p2p pairs). A rank that skipped or added a collective on some group (the
    collectives check's `missing_collective`) has all its later positions shifted, on every
    group, so it is left out. SPMD traces pass at once; when it fails, `simulate` decides. One
    window over the events, no sort."""
    pats = comm_patterns(trace).filter((pl.col("kind") != WAIT) & (pl.col("group") >= 0))
    if pats.is_empty():
        return True
    ev = trace.with_patterns(trace.with_codes(trace.stream.select("rank", "code", "seq"), pats), "group", "kind",
                             table=pats)
    ev = ev.with_columns(pos=_position_in_rank(ev["rank"]))
    coll = pl.col("kind") == COLLECTIVE  # p2p rows are always kept: pairs legitimately differ in counts
    counts = ev.filter(coll).group_by("group", "rank").agg(n=pl.len())
    usual = counts.group_by("group").agg(usual=pl.col("n").mode().first())
    odd = counts.join(usual, on="group").filter(pl.col("n") != pl.col("usual")).select("rank").unique()
    if odd.height:  # its positions are shifted on every group: leave the rank out altogether
        ev = ev.join(odd, on="rank", how="anti", maintain_order="left")
    if ev.filter(~coll).height:  # p2p: instance (group, seq, src, dst), T = median position
        peer = trace.with_patterns(ev.select("code"), "peer", table=pats)["peer"]
        ev = ev.with_columns(a=pl.when(pl.col("kind") == SEND).then("rank").when(pl.col("kind") == RECV).then(peer)
                             .otherwise(-1),
                             b=pl.when(pl.col("kind") == SEND).then(peer).when(pl.col("kind") == RECV).then("rank")
                             .otherwise(-1))
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
