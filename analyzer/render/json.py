"""Machine-readable output for CI: one JSON object per command on stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

from analyzer.compare.summary import Summary
from analyzer.model.trace import Trace


def trace_info(trace: Trace, notes: Sequence[str] = ()) -> dict:
    h = trace.header
    return {
        "world_size": h["world_size"],
        "mode": h.get("mode"),
        "torch": h.get("torch"),
        "program": (h.get("config") or {}).get("program"),
        "ranks": trace.ranks,
        "missing_ranks": trace.missing_ranks,
        "truncated": trace.truncated,
        "notes": [*trace.notes, *notes],
        "events": trace.n_events,
    }


def summary(trace: Trace, s: Summary) -> None:
    out = {
        "trace": trace_info(trace),
        "classes": [
            {"class": c["class"], "ranks": list(c["ranks"]), "events": c["events"]}
            for c in s.classes.iter_rows(named=True)
        ],
        "rows": s.table.to_dicts(),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def findings(trace: Trace, found: list, notes: Sequence[str] = (), **extra) -> None:
    """The findings contract: findings, counts per kind, the command's `extra` keys, the trace."""
    counts: dict[str, int] = {}
    for f in found:
        counts[f.kind.name] = counts.get(f.kind.name, 0) + 1
    out = {"findings": [f.to_json() for f in found], "counts": counts, **extra, "trace": trace_info(trace, notes)}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def advice(trace: Trace, found: list, notes: Sequence[str] = (), cluster: str | None = None) -> None:
    """`analyzer lint --json`: the findings contract, severity advice; `cluster` the one priced on."""
    findings(trace, found, notes, cluster=cluster)


def numerics(trace: Trace, found: list, notes: Sequence[str] = (), ref: str | None = None) -> None:
    """`analyzer numerics --json`: the findings contract; `reference` the --ref path."""
    findings(trace, found, notes, reference=ref)


def hang(trace: Trace, report, frontier: list[dict]) -> None:
    out = {
        "findings": [f.to_json() for f in report.findings],
        "semantics": report.semantics,
        "stuck_ranks": sorted(report.stuck),
        "frontier": frontier,
        "wait_for": sorted([list(e) for e in report.graph.edges]),
        "trace": trace_info(trace),
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


def diff_object(d) -> dict:
    """The diff as one JSON-able object: each divergence with `rank` (first of its class) and
    `ranks`, and the volume table rows."""
    divergences = [dict(asdict(div), rank=div.ranks[0]) for div in d.divergences]
    return {
        "equal": d.equal,
        "world_size_a": d.world_size_a,
        "world_size_b": d.world_size_b,
        "streams_compared": d.streams_compared,
        "only_a": d.only_a,
        "only_b": d.only_b,
        "divergences": divergences,
        "volume": d.volume.to_dicts(),
    }


def diff(a: Trace, b: Trace, d, incomplete: dict | None = None) -> None:
    out = diff_object(d)
    out["trace_a"], out["trace_b"] = trace_info(a), trace_info(b)
    out["incomplete"] = {side: [f.to_json() for f in found] for side, found in (incomplete or {}).items()}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
