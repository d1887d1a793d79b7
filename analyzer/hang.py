"""`analyzer hang`: why a run stopped, and what each stuck rank should have done next.

Which semantics: a dry-run recording (fake / local mode) never blocks, so its streams run past
the point where a real job would hang; they are replayed under blocking semantics
(`waitfor.advance`, columnar; `waitfor.settle` where the ordering certificate holds). A
post-mortem trace (Flight Recorder dumps, a killed replay) ends each stream where its rank was
stuck; its blocking points are found columnar (`waitfor.frontier`).
Root causes are the cycles of the wait-for graph and the ranks others wait on that are not
blocked themselves (stuck in compute, or dead), with how many ranks wait on them transitively.
A cause that a check reports (an unmatched p2p, a skipped or extra collective) is that check's
finding, extended with the ranks it leaves waiting: check and hang give one verdict.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import networkx as nx
import polars as pl

from analyzer.checks import collectives, fr_numbers, rank_status
from analyzer.checks.common import group_table
from analyzer.checks.options import CheckOptions
from analyzer.checks.ordering import DEADLOCK_CYCLE, cycle_findings
from analyzer.checks.p2p import mismatch_causes, unmatched_causes
from analyzer.checks.stalled_rank import STALLED_RANK, stalled
from analyzer.model.findings import Finding
from analyzer.model.text import group_text, ranks_text
from analyzer.model.trace import Trace
from analyzer.waitfor.advance import advance
from analyzer.waitfor.certificate import ordered
from analyzer.waitfor.frontier import frontier
from analyzer.waitfor.graph import wait_graph
from analyzer.waitfor.progress import waited_ops
from analyzer.waitfor.semantics import Blocked, WaitKey, has_p2p, post_mortem
from analyzer.waitfor.settle import settle


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


@dataclass
class _Causes:
    """The root causes found so far, in report order, and per cause the ranks found waiting on it
    (a checks' finding adopted as the cause of some waits is listed once, however many)."""

    found: list[Finding] = field(default_factory=list)
    waited_on: dict[int, list[int]] = field(default_factory=dict)
    """id(finding) -> the ranks it leaves waiting directly (sinks, or a cycle's ranks)."""

    def add(self, f: Finding, ranks: Iterable[int] = ()) -> None:
        if id(f) not in self.waited_on:
            self.found.append(f)
            self.waited_on[id(f)] = []
        self.waited_on[id(f)].extend(ranks)


def analyze(trace: Trace, expected: Trace | None = None, eager_bytes: int = 0) -> HangReport:
    stopped = post_mortem(trace)
    stuck = _blocked(trace, stopped, eager_bytes)
    graph = wait_graph(stuck)
    groups = group_table(trace)
    by_key = _p2p_causes(trace, stuck, stopped)
    causes = _Causes()
    for cycle in cycle_findings(trace, stuck, only_matched=False):
        # a cycle through an op some party never issues is no ordering deadlock: that op is the cause
        ops = [by_key[stuck[r].key] for r in cycle.cycle or [] if stuck[r].key in by_key]
        if not ops:
            causes.found.append(cycle)
        for by_op in ops:
            causes.add(by_op, cycle.cycle or [])
    for mismatch, keys in _p2p_mismatches(trace, stuck):
        # both sides of a transfer whose sizes disagree are stuck in it, waiting on each other
        causes.add(mismatch, sorted(r for r, b in stuck.items() if b.key in keys))
    on_cycle = {r for f in causes.found if f.kind == DEADLOCK_CYCLE for r in f.ranks}
    mismatched = _mismatched(trace, stopped)
    for sink in sorted(n for n in graph.nodes if graph.out_degree(n) == 0 and n not in stuck):
        cause = _p2p_cause(sink, stuck, graph, by_key)
        if cause is None and mismatched:
            cause = _collective_cause(sink, stuck, graph, groups, mismatched)
        if cause is None:
            causes.found.append(stalled(trace, sink, stuck, graph, groups, expected))
        else:
            causes.add(cause, [sink])
    found = [
        _leaving_waiting(f, causes.waited_on[id(f)], stuck, graph) if id(f) in causes.waited_on else f
        for f in causes.found
    ]
    # ranks that failed or left nothing are root causes too, unless the hang explains them: a stuck
    # rank's stream ends where it was stuck, a stalled rank's finding says how it ended
    explained = set(stuck) | {r for f in found if f.kind == STALLED_RANK for r in f.culprit_ranks}
    explained |= {r for sinks in causes.waited_on.values() for r in sinks}
    found = fr_numbers.annotate(trace, found + rank_status.check(trace, explained))
    return HangReport(
        "post-mortem" if stopped else "replayed",
        stuck,
        graph,
        found,
        on_cycle,
        {r: f"{b.key.text(groups, b.event['op'])}\n{b.event.get('frame') or '?'}" for r, b in stuck.items()},
        _node_notes(trace, stuck, found, groups),
    )


def _blocked(trace: Trace, stopped: bool, eager_bytes: int) -> dict[int, Blocked]:
    """Where each rank is stuck: post-mortem, where its stream ends (frontier); a dry run replayed
    columnar (advance), in settle's fewer rounds where no ordering cycle is possible."""
    if stopped:
        return frontier(trace)
    settled = settle(trace, eager_bytes) if not has_p2p(trace) and ordered(trace) else None
    return settled if settled is not None else advance(trace, eager_bytes)


def _p2p_causes(trace: Trace, stuck: dict[int, Blocked], stopped: bool) -> dict[WaitKey, Finding]:
    """The unmatched_p2p finding (check's: p2p_cause.py) of each p2p key it explains. Only where a
    rank is blocked in a send / recv that can be unmatched (a dry run's replay knows which are):
    the p2p join over a pipeline at scale is not paid for a matched cycle."""
    if not any(not b.key.collective and (stopped or not b.matched) for b in stuck.values()):
        return {}
    return {k: f for f, keys in unmatched_causes(trace) for k in keys}


def _p2p_mismatches(trace: Trace, stuck: dict[int, Blocked]) -> list[tuple[Finding, set[WaitKey]]]:
    """check's p2p_mismatch findings that some stuck rank is blocked in (with their keys)."""
    keys = {b.key for b in stuck.values() if not b.key.collective}
    if not keys:
        return []
    return [(f, k) for f, k in mismatch_causes(trace) if k & keys]


def _leaving_waiting(cause: Finding, sinks: list[int], stuck: dict[int, Blocked], graph: nx.DiGraph) -> Finding:
    """A check's finding adopted as a cause, with the ranks it leaves blocked (a post-mortem's
    p2p finding lists them already)."""
    if cause.waiting_ranks is not None:
        return cause
    waiting = sorted(set().union(*(nx.ancestors(graph, s) | ({s} & set(stuck)) for s in sinks)))
    sinks = sorted(set(sinks) - set(stuck))
    message = (
        cause.message + f"; replayed, this leaves rank{'s' if len(waiting) > 1 else ''} {ranks_text(waiting)} blocked"
    )
    if sinks:
        message += f" waiting for rank{'s' if len(sinks) > 1 else ''} {ranks_text(sinks)}"
    return replace(cause, message=message, waiting_ranks=waiting)


def _mismatched(trace: Trace, stopped: bool) -> list[Finding]:
    """The collectives check's extra or skipped collectives (a rank that stopped is a stall). In
    a post-mortem also the collective a rank never issued while its own last op on that group is
    still open: it went on past that op (async work, gloo's never-updated entries) and never
    reached the next one, which the others wait in -- check's verdict, not a rank stuck inside
    an op. Only where some rank is stuck at all."""
    found = [f for f in collectives.check(trace, CheckOptions()).findings if f.kind == collectives.MISSING_COLLECTIVE]
    if not stopped:
        return [f for f in found if f.detail in ("extra", "skipped")]
    return [f for f in found if f.detail in ("extra", "skipped") or _left_open(trace, f)]


def _left_open(trace: Trace, f: Finding) -> bool:
    """Every culprit's last recorded op on the finding's group is one no member was seen to
    complete (in flight when the dumps were taken: the culprit is not stuck inside an op the
    others finished, which is a stalled rank)."""
    if not trace.has("state") or f.group is None:
        return False
    gid = next((g for g, v in group_table(trace).items() if v == f.group), None)
    on_group = trace.events.filter(pl.col("group") == gid)
    last = on_group.filter(pl.col("rank").is_in(f.culprit_ranks)).sort("idx").group_by("rank").last()
    if last.height != len(f.culprit_ranks):
        return False
    done = on_group.filter(pl.col("seq").is_in(last["seq"].unique().to_list()) & (pl.col("state") == "completed"))
    return done.is_empty()


def _p2p_cause(
    sink: int, stuck: dict[int, Blocked], graph: nx.DiGraph, by_key: dict[WaitKey, Finding]
) -> Finding | None:
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
        f.culprit_ranks[0]: f"never entered\n{f.never_entered or '?'}"
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
