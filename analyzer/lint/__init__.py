"""Comm lint (`analyzer lint`): advice on a correct trace, never an error. Each rule is a pure
function `lint(trace, options, comm) -> Linted` in its own module, listed in RULES (a plain
registry); `comm` is the collectives frame every rule reads (analyzer.lint.common.collectives),
built once. A rule declares its finding kind (severity ADVICE) at its top; KINDS lists them.
Rules and thresholds: docs/analysis.md#comm-lint."""

from __future__ import annotations

from analyzer.lint import blocking_backward, bucketing, cross_node, regather, roundtrip, wide_dtype
from analyzer.lint.common import collectives
from analyzer.lint.options import Linted, LintOptions
from analyzer.model.findings import Kind
from analyzer.model.trace import Trace

RULES = {
    "cross_node": cross_node.lint,
    "bucketing": bucketing.lint,
    "wide_dtype": wide_dtype.lint,
    "roundtrip": roundtrip.lint,
    "regather": regather.lint,
    "blocking_backward": blocking_backward.lint,
}

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        cross_node.CROSS_NODE_GROUP,
        bucketing.UNBUCKETED,
        wide_dtype.WIDE_DTYPE,
        roundtrip.REDISTRIBUTE_ROUNDTRIP,
        regather.REPEATED_GATHER,
        blocking_backward.BLOCKING_BACKWARD,
    )
}
"""Every kind of advice, by name."""


def run_lint(trace: Trace, options: LintOptions | None = None, names: list[str] | None = None) -> Linted:
    """Every rule (or those named), their advice in RULES order."""
    options = options or LintOptions()
    comm = collectives(trace, options)
    out = Linted()
    for name, rule in RULES.items():
        if names is None or name in names:
            out.extend(rule(trace, options, comm))
    return out
