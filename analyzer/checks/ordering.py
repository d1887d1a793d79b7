"""Deadlock-prone orderings: replay the streams under blocking semantics (analyzer.waitfor.advance) and
report each cycle of waiting ranks once, as `deadlock_cycle`: every rank on it, the op and group
it is blocked in, whom it waits for, with user frames.

Ranks left blocked outside a cycle are waiting for a collective some member never issues: that
is a `missing_collective` (collectives check) or a hang to explain (`analyzer hang`), not an
ordering problem, so it is not repeated here.
"""

from __future__ import annotations

from analyzer.checks.common import conflicting_gids, group_table
from analyzer.checks.options import Checked, CheckOptions
from analyzer.model.findings import Finding, Kind
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace
from analyzer.waitfor.advance import advance
from analyzer.waitfor.certificate import ordered
from analyzer.waitfor.frontier import frontier
from analyzer.waitfor.graph import cycles, wait_graph
from analyzer.waitfor.semantics import Blocked, has_p2p, post_mortem

DEADLOCK_CYCLE = Kind(
    name="deadlock_cycle", about="ranks that wait on each other in a cycle (an ordering deadlock)", blocks=True
)


def describe(b: Blocked, groups: dict) -> str:
    ev = b.event
    where = (ev.get("frame") or "?") + (f" [{ev['module']}]" if ev.get("module") else "")
    if ev["op"] == "wait":
        what = "a wait on " + b.key.text(groups)
    else:
        what = b.key.text(groups, ev["op"])
    return (
        f"rank {b.rank} blocked in {what} at {where}, waiting for rank{'s' if len(b.waits_for) > 1 else ''} "
        f"{ranks_text(b.waits_for)}"
    )


def one_transfer(cycle: list[int], blocked: dict[int, Blocked]) -> bool:
    """Two ranks blocked in the two sides of one send / recv (a post-mortem: neither completed)
    wait on each other but are in the same transfer: no ordering cycle. It is in flight, or its
    sides disagree (a p2p_mismatch, the verdict of its own)."""
    if len(cycle) != 2:
        return False
    a, b = (blocked[r].key for r in cycle)
    return not a.collective and a.partner() == b


def cycle_findings(trace: Trace, blocked: dict[int, Blocked], only_matched: bool = True) -> list[Finding]:
    """One deadlock_cycle per cycle of waiting ranks. With `only_matched`, cycles through an op
    that some party never issues are left out: they are missing collectives / unmatched p2p,
    which their own checks report, not ordering problems."""
    groups = group_table(trace)
    out = []
    for cycle in cycles(wait_graph(blocked)):
        if only_matched and not all(blocked[r].matched for r in cycle):
            continue
        if one_transfer(cycle, blocked):
            continue
        ranks = sorted(cycle)
        steps = [describe(blocked[r], groups) for r in cycle]
        first = blocked[cycle[0]]
        gids = sorted({blocked[r].key.group for r in cycle})
        # the p2p links the cycle runs over (a pipeline edge between two stages), as rank pairs
        edges = sorted(
            {tuple(sorted((blocked[r].key.src, blocked[r].key.dst))) for r in cycle if not blocked[r].key.collective}
        )
        over = "; over p2p " + ", ".join(f"{a}<->{b}" for a, b in edges) if edges else ""
        out.append(
            Finding(
                kind=DEADLOCK_CYCLE,
                ranks=ranks,
                culprit_ranks=ranks,
                group=groups.get(first.key.group),
                seq=first.event["seq"],
                op=first.event["op"],
                expected="every member enters its collectives in one order",
                actual={r: blocked[r].key.text(groups, blocked[r].event["op"]) for r in cycle},
                frames={r: blocked[r].event.get("frame") or "?" for r in cycle},
                cycle=cycle,
                groups=[groups[g] for g in gids if g in groups],
                p2p_edges=[list(e) for e in edges],
                message=(
                    f"deadlock: {len(ranks)} ranks wait on each other in a cycle through "
                    f"{len(gids)} group{'s' if len(gids) > 1 else ''}: "
                    + "; ".join(steps)
                    + f"; and rank {cycle[0]} again{over}"
                ),
            )
        )
    return out


def check(trace: Trace, options: CheckOptions) -> Checked:
    if post_mortem(trace):  # FR dumps, a replay: the cycle is in where each rank is stuck
        return Checked(findings=cycle_findings(trace, frontier(trace), only_matched=False))
    if not has_p2p(trace) and ordered(trace):  # columnar certificate: no cycle is possible
        return Checked()
    # the replay, columnar (any size, pipelines included); groups whose name means different
    # members on different ranks cannot be matched at all: group_mismatch reports them
    return Checked(findings=cycle_findings(trace, advance(trace, options.eager_bytes, conflicting_gids(trace))))
