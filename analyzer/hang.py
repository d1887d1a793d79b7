"""`analyzer hang`: why a run stopped, and what each stuck rank should have done next.

Which semantics: a dry-run recording (fake / local mode) never blocks, so its streams run past
the point where a real job would hang; they are replayed under blocking semantics
(`waitfor.advance`, columnar; `waitfor.settle` where the ordering certificate holds). A
post-mortem trace (Flight Recorder dumps, a killed replay) ends each stream where its rank was
stuck; its blocking points are found columnar (`waitfor.frontier`).
Root causes are the cycles of the wait-for graph and the ranks others wait on that are not
blocked themselves (stuck in compute, or dead), with how many ranks wait on them transitively.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import networkx as nx
import polars as pl

from analyzer.checks import fr_numbers, rank_status
from analyzer.checks.common import group_table
from analyzer.checks.ordering import DEADLOCK_CYCLE, cycle_findings
from analyzer.checks.p2p import unmatched_causes
from analyzer.findings import Finding, group_text, kind, ranks_text
from analyzer.trace import Trace
from analyzer.waitfor.advance import advance
from analyzer.waitfor.certificate import ordered
from analyzer.waitfor.frontier import frontier
from analyzer.waitfor.graph import wait_graph
from analyzer.waitfor.semantics import COMM, Blocked, has_p2p, post_mortem
from analyzer.waitfor.settle import settle

STALLED_RANK = kind(
    "stalled_rank",
    "a rank others wait on that is not blocked in a recorded op itself (stuck in "
    "compute, or dead): a root cause of a hang",
    blocks=True,
)


@dataclass
class HangReport:
    semantics: str
    """"replayed" (dry run) or "post-mortem" (streams end where ranks were stuck)."""
    stuck: dict[int, Blocked]
    graph: nx.DiGraph
    findings: list[Finding] = field(default_factory=list)
    on_cycle: set[int] = field(default_factory=set)
    """Ranks on a deadlock cycle."""
    labels: dict[int, str] = field(default_factory=dict)
    """Per stuck rank: what it is blocked in (a line), then its frame (the DOT graph's labels)."""
    node_notes: dict[int, str] = field(default_factory=dict)
    """Per stuck or stalled rank: a short note (blocked in what, where; or what it never entered),
    for pictures of the graph."""

    @property
    def hung(self) -> bool:
        return bool(self.stuck)


def analyze(trace: Trace, expected: Trace | None = None, eager_bytes: int = 0) -> HangReport:
    stopped = post_mortem(trace)
    if stopped:
        stuck = frontier(trace)
    else:  # a dry run: replayed columnar (advance); settle's fewer rounds where no ordering cycle is possible
        settled = settle(trace, eager_bytes) if not has_p2p(trace) and ordered(trace) else None
        stuck = settled if settled is not None else advance(trace, eager_bytes)
    graph = wait_graph(stuck)
    groups = group_table(trace)
    # a send / recv nobody matches explains the waits it causes (p2p_cause.py: the same verdict as check)
    # (only where a rank is blocked in a send / recv that can be unmatched: a dry run's replay knows
    # which are; the p2p join over a pipeline at scale is not paid for a matched cycle)
    p2p_blocked = any(not b.key.collective and (stopped or not b.matched) for b in stuck.values())
    by_key = {k: f for f, keys in unmatched_causes(trace) for k in keys} if p2p_blocked else {}
    caused: dict[int, tuple[Finding, list[int]]] = {}  # id(finding) -> (finding, the ranks waited on)
    found: list[Finding] = []
    for cycle in cycle_findings(trace, stuck, only_matched=False):
        # a cycle through an op some party never issues is no ordering deadlock: that op is the cause
        causes = [by_key[stuck[r].key] for r in cycle.extra["cycle"] if stuck[r].key in by_key]
        if not causes:
            found.append(cycle)
        for by_op in causes:
            if id(by_op) not in caused:
                found.append(by_op)
            caused.setdefault(id(by_op), (by_op, []))[1].extend(cycle.extra["cycle"])
    on_cycle = {r for f in found if f.kind == DEADLOCK_CYCLE for r in f.ranks}
    mismatched = None if stopped else _mismatched(trace)
    for sink in sorted(n for n in graph.nodes if graph.out_degree(n) == 0 and n not in stuck):
        cause = _p2p_cause(sink, stuck, graph, by_key)
        if cause is None and mismatched:
            cause = _collective_cause(sink, stuck, graph, groups, mismatched)
        if cause is None:
            found.append(_stalled(trace, sink, stuck, graph, groups, expected))
            continue
        if id(cause) not in caused:
            found.append(cause)
        caused.setdefault(id(cause), (cause, []))[1].append(sink)
    for cause, sinks in caused.values():
        if "waiting_ranks" in cause.extra:  # a post-mortem's p2p finding: check listed them already
            continue
        waiting = sorted(set().union(*(nx.ancestors(graph, s) | ({s} & set(stuck)) for s in sinks)))
        cause.extra["waiting_ranks"] = waiting
        sinks = sorted(set(sinks) - set(stuck))
        cause.message += f"; replayed, this leaves rank{'s' if len(waiting) > 1 else ''} {ranks_text(waiting)} blocked"
        if sinks:
            cause.message += f" waiting for rank{'s' if len(sinks) > 1 else ''} {ranks_text(sinks)}"
    # ranks that failed or left nothing are root causes too, unless the hang explains them: a stuck
    # rank's stream ends where it was stuck, a stalled rank's finding says how it ended
    explained = set(stuck) | {r for f in found if f.kind == STALLED_RANK for r in f.culprit_ranks}
    explained |= {r for _, sinks in caused.values() for r in sinks}
    found += rank_status.check(trace, explained)
    labels = {r: f"{b.key.text(groups, b.event['op'])}\n{b.event.get('frame') or '?'}" for r, b in stuck.items()}
    found = fr_numbers.annotate(trace, found)
    return HangReport(
        "post-mortem" if stopped else "replayed",
        stuck,
        graph,
        found,
        on_cycle,
        labels,
        _node_notes(trace, stuck, found, groups),
    )


def _mismatched(trace: Trace) -> list[Finding]:
    """The collectives check's extra or skipped collectives (a rank that stopped is a stall)."""
    from analyzer.checks import collectives
    from analyzer.checks.options import CheckOptions

    return [
        f
        for f in collectives.check(trace, CheckOptions()).findings
        if f.kind == collectives.MISSING_COLLECTIVE and f.extra.get("detail") in ("extra", "skipped")
    ]


def _p2p_cause(sink: int, stuck: dict[int, Blocked], graph: nx.DiGraph, by_key: dict) -> Finding | None:
    """The unmatched_p2p finding (check's) of an op a direct waiter of `sink` is blocked in, unless
    it names `sink` itself (a post-mortem partner that never got there: a stalled rank)."""
    for w in sorted(graph.predecessors(sink)):
        cause = by_key.get(stuck[w].key)
        if cause is not None and sink not in cause.culprit_ranks:
            return cause
    return None


def _collective_cause(
    sink: int, stuck: dict[int, Blocked], graph: nx.DiGraph, groups: dict, mismatched: list[Finding]
) -> Finding | None:
    """In a dry run, a rank that issued an extra collective (or skipped one) shifts its sequence
    on that group: replayed, the others finish while it blocks in a collective nobody else
    issues, and they look like stalled ranks. The root cause is the collectives check's finding
    on that group whose culprits are among the ranks involved: check and hang give one verdict."""
    direct = sorted(graph.predecessors(sink))
    gids = {stuck[w].key.group for w in direct if stuck[w].key.collective}
    involved = set(direct) | {sink}
    for f in mismatched:  # the first (lowest position) finding on the group that names them
        if any(f.group == groups.get(g) for g in gids) and set(f.culprit_ranks) & involved:
            return f
    return None


def _node_notes(trace: Trace, stuck: dict[int, Blocked], found: list[Finding], groups: dict) -> dict[int, str]:
    """What each rank of the graph is blocked in and where (short: it sits under a node), or what
    a stalled rank never entered."""
    out = {
        f.culprit_ranks[0]: f"never entered\n{f.extra.get('never_entered', '?')}"
        for f in found
        if f.kind == STALLED_RANK and len(f.culprit_ranks) == 1
    }
    waited = waited_ops(trace, stuck, [r for r, b in stuck.items() if b.event["op"] == "wait"])
    for r, b in stuck.items():
        at_wait = b.event["op"] == "wait"
        what = b.key.text(groups, waited.get(r, "op") if at_wait else b.event["op"], arrow="→", label_only=True)
        frame = os.path.basename(str(b.event.get("frame") or "?"))
        out[r] = ("wait on " if at_wait else "") + f"{what}\n{frame}"
    return out


def _stalled(
    trace: Trace, rank: int, stuck: dict[int, Blocked], graph: nx.DiGraph, groups: dict, expected: Trace | None
) -> Finding:
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
    msg = (
        f"rank {rank} never entered {what} ({frame}); {len(waiters)} rank"
        f"{'s' if len(waiters) != 1 else ''} wait on it transitively ({len(direct)} directly){tail}"
    )
    extra: dict[str, object] = {"waiting_ranks": waiters, "never_entered": what}
    if expected is not None:
        members = trace.groups.filter(pl.col("gid") == first.key.group)["ranks"]
        waited = (tuple(members[0]), first.key.seq) if first.key.collective and len(members) else None
        nxt = next_expected(trace, expected, rank, waited)
        if nxt:
            msg += f". Expected next (golden): {nxt['text']}"
            extra["expected_next"] = nxt
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
        extra=extra,
    )


def _comm_rows(trace: Trace, rank: int) -> pl.DataFrame:
    ops = [o for o in COMM if o != "wait"]
    return (
        trace.select(ops=ops, ranks=[rank])
        .with_columns(op=pl.col("op").cast(pl.String))
        .join(trace.groups.select("gid", "label", "ranks"), left_on="group", right_on="gid", how="left")
        .sort("idx")
    )


def _describe(row: dict) -> str:
    where = (row.get("frame") or "?") + (f" [{row['module']}]" if row.get("module") else "")
    group = f"{row['label']} (ranks {ranks_text(row['ranks'])})" if row.get("label") else "?"
    return f"{row['op']} #{row['seq']} on {group} at {where} ({row['phase']}, step {row['step']})"


def last_comm(trace: Trace, rank: int) -> str | None:
    rows = _comm_rows(trace, rank)
    return _describe(rows.row(-1, named=True)) if rows.height else None


def next_expected(trace: Trace, golden: Trace, rank: int, waited: tuple | None = None) -> dict | None:
    """What `rank` should have run next, from the golden pattern: the golden's op on the group
    (same members) and sequence number its peers wait in, when there is one; else placed by how
    many comm ops the rank got through (a Flight Recorder ring buffer may have lost the rest)."""
    if rank not in golden.ranks:
        return None
    ahead = _comm_rows(golden, rank)
    done = _comm_rows(trace, rank).height
    if waited is not None:
        members, seq = waited
        hit = ahead.with_row_index("i").filter((pl.col("seq") == seq) & (pl.col("ranks") == list(members)))
        if hit.height:
            done = int(hit["i"][0])
    if done >= ahead.height:
        return {"text": "nothing: the golden rank ends here too", "index": done}
    row = ahead.row(done, named=True)
    return {
        "text": _describe(row),
        "index": done,
        "op": row["op"],
        "seq": row["seq"],
        "group": row["label"],
        "module": row["module"],
        "frame": row["frame"],
        "phase": row["phase"],
        "step": row["step"],
    }


def frontier_rows(trace: Trace, report: HangReport) -> list[dict]:
    """Per stuck collective instance: who is in it and who never arrived (for the tables)."""
    groups = group_table(trace)
    waited = waited_ops(trace, report.stuck, [r for r, b in report.stuck.items() if b.event["op"] == "wait"])
    out: dict[tuple, dict] = {}
    for b in report.stuck.values():
        what = (
            b.key.text(groups, b.event["op"])
            if b.event["op"] != "wait"
            else "wait on " + b.key.text(groups, waited.get(b.rank, "op"))
        )
        row = out.setdefault(
            b.key, {"what": what, "group": group_text(groups.get(b.key.group)), "blocked": [], "missing": set()}
        )
        row["blocked"].append(b.rank)
        row["missing"].update(b.waits_for)
    return [dict(r, blocked=sorted(r["blocked"]), missing=sorted(r["missing"])) for r in out.values()]


def waited_ops(trace: Trace, stuck: dict[int, Blocked], ranks: list[int]) -> dict[int, str]:
    """For stuck ranks blocked at a `wait`: the op it waits on (one select, any count)."""
    refs = [(r, stuck[r].event["ref"]) for r in ranks if r in stuck and stuck[r].event["op"] == "wait"]
    if not refs:
        return {}
    want = pl.DataFrame(refs, schema={"rank": pl.Int32, "idx": pl.Int32}, orient="row")
    ops = trace.select("rank", "idx", "op", ranks=sorted({r for r, _ in refs}))
    return {r: str(op) for r, _, op in want.join(ops, on=["rank", "idx"], how="inner").iter_rows()}
