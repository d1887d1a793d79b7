"""A rank that left no Flight Recorder dump while its peers wait for it: `missing_rank`.

A rank whose process died (a crash, an OOM kill, a failed assertion) writes no dump; the other
members of its groups are then stuck in the collective it never joined, and their dumps show
it as not completed. Only dumps carry that `state`; ranks missing or failed otherwise (commtrace
traces, dumps nobody waits on) are reported by checks/rank_status.py. Per group with a missing
member, the collective the present members are blocked in is the latest uncompleted one each
entered (a dump ends where its rank was stuck; whether earlier entries show as completed
depends on when gloo updated its status).
"""

from __future__ import annotations

import polars as pl

from analyzer.checks import rank_status
from analyzer.checks.common import group_table
from analyzer.checks.options import Checked, CheckOptions
from analyzer.checks.rank_status import MISSING_RANK
from analyzer.model.findings import Finding
from analyzer.model.text import group_text, ranks_text
from analyzer.model.trace import Trace
from traceformat.ops import COLLECTIVE_OPS


def check(trace: Trace, options: CheckOptions) -> Checked:
    """Missing dumps where their peers wait, then every other rank that failed or left nothing
    (checks/rank_status.py)."""
    waited = _waited_on(trace)
    return Checked(findings=waited + rank_status.check(trace, {r for f in waited for r in f.culprit_ranks}))


def _waited_on(trace: Trace) -> list[Finding]:
    missing = set(trace.missing_ranks)
    if not missing or not trace.has("state"):
        return []
    groups = group_table(trace)
    pending = (
        trace.select(ops=sorted(COLLECTIVE_OPS))
        .with_columns(op=pl.col("op").cast(pl.String))
        .filter((pl.col("state") != "completed") & (pl.col("group") >= 0))
        .group_by("group", "rank")
        .agg(pl.all().sort_by("seq").last())
    )
    out = []
    for (gid,), rows in pending.group_by(["group"], maintain_order=True):
        group = groups.get(gid)
        absent = sorted(missing & set(group["ranks"])) if group else []
        if group is None or not absent:
            continue
        at = rows.sort("seq", descending=True).row(0, named=True)
        waiting = sorted(rows.filter(pl.col("seq") == at["seq"])["rank"].to_list())
        who = f"rank{'s' if len(absent) > 1 else ''} {ranks_text(absent)}"
        where = at["frame"] or "?"
        out.append(
            Finding(
                kind=MISSING_RANK,
                ranks=list(group["ranks"]),
                culprit_ranks=absent,
                group=group,
                seq=at["seq"],
                op=at["op"],
                expected=f"every member joins {at['op']} #{at['seq']}",
                actual={r: "no dump" for r in absent},
                frames={-1: where},
                waiting=waiting,
                state=at["state"],
                message=(
                    f"{who} left no Flight Recorder dump, and rank{'s' if len(waiting) > 1 else ''} "
                    f"{ranks_text(waiting)} {'are' if len(waiting) > 1 else 'is'} blocked in {at['op']} "
                    f"#{at['seq']} on {group_text(group)} ({where}, {at['state']}): {who} never completed it "
                    f"-- its process most likely died (see its log)"
                ),
            )
        )
    return sorted(out, key=lambda f: (f.group["label"] if f.group else "", f.seq))
