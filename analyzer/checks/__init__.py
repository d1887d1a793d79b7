"""Checks: each a pure function from a loaded Trace to a list of Findings (a plain registry)."""

from __future__ import annotations

from analyzer.checks import collectives, groups, ordering, p2p
from analyzer.checks import missing_ranks
from analyzer.findings import Finding
from analyzer.load import Trace

CHECKS = {
    "groups": groups.check,
    "collectives": collectives.check,
    "p2p": p2p.check,
    "missing_ranks": missing_ranks.check,
    "ordering": ordering.check,
}


def run_checks(trace: Trace, names: list[str] | None = None) -> list[Finding]:
    out: list[Finding] = []
    for name, check in CHECKS.items():
        if names is None or name in names:
            out.extend(check(trace))
    return out
