"""`stalled_rank`: a rank others wait on that is not blocked in a recorded op itself (stuck in
compute, or dead). Not a check of its own: `analyzer hang` names one for each rank of the
wait-for graph that others wait on and no other finding explains."""

from __future__ import annotations

import networkx as nx
import polars as pl

from analyzer.model.findings import Finding, Kind
from analyzer.model.trace import Trace
from analyzer.waitfor.progress import last_comm, next_expected
from analyzer.waitfor.semantics import Blocked

STALLED_RANK = Kind(
    name="stalled_rank",
    about="a rank others wait on that is not blocked in a recorded op itself (stuck in "
    "compute, or dead): a root cause of a hang",
    blocks=True,
)


def stalled(
    trace: Trace, rank: int, stuck: dict[int, Blocked], graph: nx.DiGraph, groups: dict, expected: Trace | None
) -> Finding:
    """The finding for `rank`, which the ranks blocked in `stuck` wait on (edges of `graph`);
    with a golden trace `expected`, what it should have run next."""
    waiters = sorted(nx.ancestors(graph, rank))
    direct = sorted(graph.predecessors(rank))
    # what the direct waiters are blocked in: the op this rank never entered
    first = min((stuck[w] for w in direct), key=lambda b: (b.key.group, b.key.seq))
    ev = first.event
    frame = ev.get("frame") or "?"
    if first.key.collective:
        what = first.key.text(groups, ev["op"]) if ev["op"] != "wait" else "the op waited on at " + frame
    else:  # the other side of the p2p transfer its peer is blocked in
        what = first.key.partner().text(groups)
    status = trace.status.get(rank, {})
    last = last_comm(trace, rank)
    tail = f"; its last recorded op was {last}" if last else "; it recorded no collective"
    if status.get("status", "ok") != "ok":
        tail += f" and it ended with {status['status']}" + (f": {status['error']}" if status.get("error") else "")
    if status.get("stack"):  # its Python stack when it was stopped (the trace header's rank_status)
        tail += f"; when stopped it was at {status.get('at') or status['stack'][0]}"
    msg = (
        f"rank {rank} never entered {what} ({frame}); {len(waiters)} rank"
        f"{'s' if len(waiters) != 1 else ''} wait on it transitively ({len(direct)} directly){tail}"
    )
    nxt = None
    if expected is not None:
        members = trace.groups.filter(pl.col("gid") == first.key.group)["ranks"]
        waited = (tuple(members[0]), first.key.seq) if first.key.collective and len(members) else None
        nxt = next_expected(trace, expected, rank, waited)
        if nxt:
            msg += f". Expected next (golden): {nxt['text']}"
    return Finding(
        kind=STALLED_RANK,
        ranks=sorted(set(waiters) | {rank}),
        culprit_ranks=[rank],
        group=groups.get(first.key.group),
        seq=first.key.seq,
        op=ev["op"],
        expected=what,
        actual={rank: last or "nothing recorded"},
        frames={rank: frame},
        message=msg,
        waiting_ranks=waiters,
        never_entered=what,
        expected_next=nxt or None,
    )
