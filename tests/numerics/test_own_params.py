"""Plain parameters each rank holds its own of (tests/programs/numerics/own_experts.py:
hand-written expert parallel, experts seeded by rank, never reduced) are not replicas:
`analyzer numerics` finds nothing in the healthy program. Before, every expert parameter was
taken as a replicated one and reported as a replica_divergence at step 0 (4 ranks, 4 values)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import PROGRAMS, run_tracer

pytestmark = pytest.mark.records


def test_per_rank_experts_are_not_replicas(tmp_path):
    out = str(tmp_path / "own.trace")
    proc = run_tracer(
        "tracer", "record", "--script", os.path.join(PROGRAMS, "numerics", "own_experts.py"),
        "-n", "4", "--mode", "local", "--numerics", "-o", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_tracer("analyzer", "numerics", out, "--json")
    report = json.loads(proc.stdout)
    assert (proc.returncode, report["findings"]) == (0, []), proc.stdout
    # the shared block is still checked as a replica: its per-rank digests are in the trace
    from analyzer.loader import load

    t = load(out)
    checked = t.numerics.join(t.replicas.select("step", "seq").unique(), on=["step", "seq"])["name"].unique().to_list()
    assert "emb.weight" in checked and not any(n.startswith("expert.") for n in checked), checked
