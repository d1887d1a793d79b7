"""Machine-readable output for CI: one JSON object per command on stdout."""

from __future__ import annotations

import json
import sys

from analyzer.load import Trace
from analyzer.summary import Summary


def trace_info(trace: Trace) -> dict:
    h = trace.header
    return {"world_size": h["world_size"], "mode": h.get("mode"), "torch": h.get("torch"),
            "program": (h.get("config") or {}).get("program"), "ranks": trace.ranks,
            "missing_ranks": trace.missing_ranks, "truncated": trace.truncated, "notes": trace.notes,
            "events": trace.events.height}


def summary(trace: Trace, s: Summary) -> None:
    out = {"trace": trace_info(trace),
           "classes": [{"class": c["class"], "ranks": list(c["ranks"]), "events": c["events"]}
                       for c in s.classes.iter_rows(named=True)],
           "rows": s.table.to_dicts()}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def findings(trace: Trace, found: list) -> None:
    counts: dict[str, int] = {}
    for f in found:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    json.dump({"findings": [f.to_json() for f in found], "counts": counts, "trace": trace_info(trace)},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


def hang(trace: Trace, report, frontier: list[dict]) -> None:
    out = {"findings": [f.to_json() for f in report.findings], "semantics": report.semantics,
           "stuck_ranks": sorted(report.stuck), "frontier": frontier,
           "wait_for": sorted([list(e) for e in report.graph.edges]), "trace": trace_info(trace)}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
