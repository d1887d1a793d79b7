"""`analyzer golden check`: given traces (named like their example) against the goldens in
traces/, torch-free: analyzer.compare.diff over normalized signatures and the volume table.
Re-recording the examples first is `tracer golden check` (tracer/record/golden.py), which calls this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from analyzer.compare.diff import Diff, diff_traces
from analyzer.compare.normalize import Options
from analyzer.loader import LoadError, load
from traceformat.golden import golden_path, matched


@dataclass
class GoldenResult:
    name: str
    golden: str
    """Path of the golden trace."""
    status: str
    """same, changed, new (no golden yet), or error."""
    diff: Diff | None = None
    """When the status is changed."""
    error: str = ""
    trace: str = ""
    """Path of the trace compared with the golden."""


def compare(trace_path: str, golden_path: str) -> GoldenResult:
    """Diff a trace against its golden (normalized signatures and the volume table)."""
    name = os.path.splitext(os.path.basename(golden_path))[0]
    if not os.path.exists(golden_path):
        return GoldenResult(name, golden_path, "new")
    try:
        d = diff_traces(load(golden_path), load(trace_path), Options.strict())  # a snapshot: everything
    except LoadError as e:
        return GoldenResult(name, golden_path, "error", error=str(e))
    return GoldenResult(name, golden_path, "same" if d.equal else "changed", diff=d, trace=trace_path)


def check(examples_dir: str, traces_dir: str, given: dict[str, str]) -> list[GoldenResult]:
    """Compare each given trace (by example name) with traces_dir/<name>.trace."""
    return [compare(trace, golden_path(traces_dir, name)) for name, trace in matched(examples_dir, given)]
