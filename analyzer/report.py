"""`analyzer report`: everything the other commands find about one trace, gathered for a picture.

    build_report(trace, ReportInputs(...)) -> Report      (analyzer.render.html draws it)

Pure: a loaded trace in, frames and findings out; nothing here draws or writes. The report runs
what `check` runs, `hang`'s analysis when the trace can hang at all (below), the volume tables
behind the plots, `summary`'s rank classes, `lint`'s advice, given a second trace `diff`, given
a cluster the communication time per step (`analyzer cost`; the advice is priced on it), and on
a trace recorded with --numerics `numerics` (against --ref where given).

When hang analysis runs: always for post-mortem traces (where each stream stopped is the whole
question; the frontier is columnar). A dry run is replayed under blocking semantics only when
something can block: a finding of a kind that leaves a rank waiting (skipped collective,
unmatched p2p, deadlock cycle, missing rank) or a stream that ended in an error or truncated.
Otherwise the checks already prove every collective and p2p completes (every group's instances
match and the ordering certificate or replay found no cycle), and replaying millions of events
in Python would only confirm it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from analyzer.checks import run_checks
from analyzer.checks.options import Checked, CheckOptions
from analyzer.compare.diff import Diff, diff_traces
from analyzer.compare.normalize import group_keys
from analyzer.compare.summary import Summary, comm_events, summarize
from analyzer.cost.cluster import ClusterSpec
from analyzer.cost.step import StepCost, step_cost
from analyzer.hang import HangReport, analyze, frontier_rows
from analyzer.lint import run_lint
from analyzer.lint.options import LintOptions, for_cluster
from analyzer.model.findings import Finding
from analyzer.model.trace import Trace
from analyzer.numerics import require
from analyzer.numerics import run as run_numerics
from analyzer.waitfor.semantics import post_mortem


@dataclass(kw_only=True, slots=True)
class ReportInputs:
    """What `analyzer report` was given besides the trace."""

    source: str
    """The trace's path, as the user gave it (shown in the title)."""
    other: Trace | None = None
    other_source: str | None = None
    """--diff: trace B and its path."""
    expected: Trace | None = None
    """--expected: a golden trace of the same config (what each stalled rank should run next)."""
    eager_bytes: int = 0
    cluster: ClusterSpec | None = None
    """--cluster: price the communication on it (time plots next to the byte plots)."""
    ref: Trace | None = None
    ref_source: str | None = None
    """--ref: a numerics reference recording and its path (`analyzer numerics --ref`)."""


@dataclass(kw_only=True, slots=True)
class Report:
    """Everything the page shows, computed; analyzer.render.html only lays it out."""

    trace: Trace
    inputs: ReportInputs
    findings: list[Finding]
    """check's findings, then hang's root causes that check did not already report."""
    notes: list[str] = field(default_factory=list)
    """What the analyses could not verify (shown with the trace's own notes)."""
    hang: HangReport | None = None
    """None where no rank can block (see the module doc)."""
    frontier: list[dict] = field(default_factory=list)
    """Per stuck collective instance: who is blocked in it, whom they wait for (hang's table)."""
    volume: pl.DataFrame
    """dim, op, phase, calls, bytes: collectives and p2p summed over all ranks."""
    per_step: pl.DataFrame
    """step, dim, calls, bytes."""
    summary: Summary
    """Rank classes, as `analyzer summary` prints them."""
    diff: Diff | None = None
    """Against inputs.other."""
    cost: StepCost | None = None
    """Communication time per step on inputs.cluster (`analyzer cost`)."""
    advice: list[Finding] = field(default_factory=list)
    """`analyzer lint`'s advice (on inputs.cluster where given)."""
    numerics: Checked | None = None
    """`analyzer numerics` (against inputs.ref where given); None for a trace without numerics."""


def may_hang(trace: Trace, found: list[Finding]) -> bool:
    """Whether hang analysis has anything to find (module doc)."""
    if post_mortem(trace) or trace.truncated:
        return True
    if any(s.get("status", "ok") != "ok" for s in trace.status.values()):
        return True
    return any(f.kind.blocks for f in found)


def volume_frames(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per dim x op x phase, per step x dim) calls and bytes of collectives and p2p, all ranks.
    Dims as `diff` names them (a 1-D mesh that reuses the default group takes its dim's name)."""
    ev = (
        comm_events(trace)
        .join(group_keys(trace).select("gid", "dim"), left_on="group", right_on="gid", how="left")
        .with_columns(dim=pl.col("dim").fill_null("-"), phase=pl.col("phase").cast(pl.String).fill_null("unknown"))
    )
    agg = [pl.len().cast(pl.Int64).alias("calls"), pl.col("bytes").sum().cast(pl.Int64)]
    volume = ev.group_by("dim", "op", "phase").agg(*agg).sort("dim", "op", "phase")
    per_step = ev.group_by("step", "dim").agg(*agg).sort("step", "dim")
    return volume, per_step


def merged_findings(checked: list[Finding], hang_found: list[Finding]) -> list[Finding]:
    """check's findings plus hang's root causes, each cycle once (both report it)."""
    seen = {(f.kind, tuple(sorted(f.culprit_ranks))) for f in checked}
    return checked + [f for f in hang_found if (f.kind, tuple(sorted(f.culprit_ranks))) not in seen]


def build_report(trace: Trace, inputs: ReportInputs) -> Report:
    checks = run_checks(trace, CheckOptions(eager_bytes=inputs.eager_bytes))
    checked, notes = checks.findings, list(checks.notes)
    hang, frontier, hang_found = None, [], []
    if may_hang(trace, checked):
        hang = analyze(trace, inputs.expected, inputs.eager_bytes)
        frontier, hang_found = frontier_rows(trace, hang), hang.findings
    volume, per_step = volume_frames(trace)
    diff = diff_traces(trace, inputs.other) if inputs.other is not None else None
    numerics = None
    if trace.numerics is not None:
        require(trace, inputs.source)  # NumericsInputError: the CLI's bad input
        if inputs.ref is not None:
            require(inputs.ref, inputs.ref_source or "the reference")
        numerics = run_numerics(trace, inputs.ref, ref_path=inputs.ref_source or "the reference")
    return Report(
        trace=trace,
        inputs=inputs,
        findings=merged_findings(checked, hang_found),
        notes=notes,
        hang=hang,
        frontier=frontier,
        volume=volume,
        per_step=per_step,
        summary=summarize(trace),
        diff=diff,
        cost=step_cost(trace, inputs.cluster) if inputs.cluster is not None else None,
        advice=run_lint(trace, for_cluster(inputs.cluster) if inputs.cluster is not None else LintOptions()).findings,
        numerics=numerics,
    )
