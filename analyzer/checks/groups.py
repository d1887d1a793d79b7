"""Group creation agrees on every rank: a group name means the same member list everywhere.

torch names groups from a counter that every rank advances on every new_group call, so a rank
that creates subgroups in another order (or with other members) gives a name another meaning:
its collectives then land in a different communicator than its peers'. Per name, the ranks that
created it vote on (members, description); the minority are the culprits.
"""

from __future__ import annotations

import polars as pl

from analyzer.checks.common import majority
from analyzer.checks.options import Checked, CheckOptions
from analyzer.model.findings import Finding, Kind
from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace

GROUP_MISMATCH = Kind(
    name="group_mismatch", about="ranks created process groups differently (members, order, or count)", majority=False
)


def check(trace: Trace, options: CheckOptions) -> Checked:
    return Checked(findings=_findings(trace))


def _findings(trace: Trace) -> list[Finding]:
    made = (
        trace.select("rank", "idx", "group", "frame", ops=["new_group", "split_group"])
        .join(trace.groups.select("gid", "name", "ranks", "label"), left_on="group", right_on="gid")
        .with_columns(call=pl.int_range(pl.len()).over("rank"))
    )
    per_culprits: dict[tuple, list] = {}
    for (name,), rows in made.group_by(["name"], maintain_order=True):
        if rows["group"].n_unique() == 1:
            continue
        views = {r: (tuple(m), lab) for r, m, lab in rows.select("rank", "ranks", "label").iter_rows()}
        value, culprits = majority(views)
        if not culprits:  # the same members under two gids (duplicated group records): no disagreement
            continue
        frames = {r: f for r, f in rows.select("rank", "frame").iter_rows()}
        calls = {r: c for r, c in rows.select("rank", "call").iter_rows()}
        per_culprits.setdefault(tuple(culprits), []).append((name, views, value, frames, calls))
    # one finding per set of deviating ranks: a rank that swapped two creations gives two names
    # another meaning, and that is one bug
    out: list[Finding] = []
    for culprit_key, names in per_culprits.items():
        culprits = list(culprit_key)
        name, views, value, frames, calls = names[0]
        parts: list[str] = []
        actual: dict[int, list[str]] = {}
        for n, v, val, fr, cl in names:
            for r in culprits:
                actual.setdefault(r, []).append(
                    f"{n!r} = {v[r][1]} ranks {ranks_text(v[r][0])} (creation call #{cl[r]}, {fr[r]})"
                )
            parts.append(f"{n!r} is {val[1]} ranks {ranks_text(val[0])} on the other ranks")
        who = f"rank{'s' if len(culprits) > 1 else ''} {ranks_text(culprits)}"
        out.append(
            Finding(
                kind=GROUP_MISMATCH,
                ranks=sorted(views),
                culprit_ranks=list(culprits),
                group={"name": name, "label": value[1], "ranks": list(value[0])},
                seq=None,
                op="new_group",
                expected="; ".join(parts),
                actual=actual,
                frames={r: frames[r] for r in culprits},
                message=(
                    f"{who} created process groups in another order or with other members: "
                    + "; ".join(parts)
                    + f", but on {who}: "
                    + "; ".join(actual[culprits[0]])
                ),
            )
        )
    return out
