"""Checks: each a pure function `check(trace, options) -> Checked` (findings and notes) in its own
module, listed in CHECKS (a plain registry). A new check is one module here, added to CHECKS,
declaring its finding kinds (`analyzer.model.findings.Kind`) at its top, listed in KINDS."""

from __future__ import annotations

from analyzer.checks import (
    collectives,
    fr_numbers,
    groups,
    missing_ranks,
    numerics_parity,
    numerics_replicas,
    ordering,
    p2p,
    p2p_cause,
    rank_status,
    shape_rules,
    stalled_rank,
)
from analyzer.checks.options import Checked, CheckOptions
from analyzer.model.findings import Finding, Kind
from analyzer.model.trace import Trace

CHECKS = {
    "groups": groups.check,
    "collectives": collectives.check,
    "p2p": p2p.check,
    "missing_ranks": missing_ranks.check,
    "ordering": ordering.check,
}

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        groups.GROUP_MISMATCH,
        collectives.OP_MISMATCH,
        shape_rules.DTYPE_MISMATCH,
        collectives.REDUCE_OP_MISMATCH,
        collectives.ROOT_MISMATCH,
        shape_rules.SHAPE_MISMATCH,
        shape_rules.SPLIT_MISMATCH,
        collectives.MISSING_COLLECTIVE,
        p2p.P2P_MISMATCH,
        p2p_cause.UNMATCHED_P2P,
        ordering.DEADLOCK_CYCLE,
        rank_status.MISSING_RANK,
        rank_status.FAILED_RANK,
        stalled_rank.STALLED_RANK,
        numerics_replicas.REPLICA_DIVERGENCE,
        numerics_parity.NUMERICS_DIVERGENCE,
        numerics_parity.PARAMETER_MISMATCH,
    )
}
"""Every kind of finding the analyzer reports (`check`'s, `hang`'s and `numerics`'), by name: what the
README and --help material list."""


def run_checks(trace: Trace, options: CheckOptions | None = None, names: list[str] | None = None) -> Checked:
    """Every check (or those named), their findings in CHECKS order, less cycle symptoms."""
    options = options or CheckOptions()
    out = Checked()
    for name, check in CHECKS.items():
        if names is None or name in names:
            out.extend(check(trace, options))
    out.findings = fr_numbers.annotate(trace, _without_cycle_symptoms(out.findings))
    return out


def _without_cycle_symptoms(found: list[Finding]) -> list[Finding]:
    """In a post-mortem (FR dumps) each rank of a deadlock cycle is stuck before the collective
    its peers wait in, which the collectives check sees as missing collectives on the cycle's
    groups: the cycle is the root cause, so those symptoms are dropped."""
    cycles = [f for f in found if f.kind == ordering.DEADLOCK_CYCLE]
    if not cycles:
        return found

    def symptom(f: Finding) -> bool:
        return f.kind == collectives.MISSING_COLLECTIVE and any(
            set(f.culprit_ranks) <= set(c.ranks) and f.group in (c.groups or []) for c in cycles
        )

    return [f for f in found if not symptom(f)]
