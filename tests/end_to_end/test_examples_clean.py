"""Every shipped example config is healthy: `analyzer check` finds nothing (no mismatch, no
deadlock: 1F1B and interleaved pipeline schedules included) and `analyzer hang` sees no hang, in
every mode the config can be recorded in (local mode refuses pipeline parallelism)."""

import pytest

from analyzer.checks import run_checks
from analyzer.hang import analyze

CASES = [
    ("fsdp", "fake"),
    ("fsdp", "local"),
    ("hsdp_tp", "fake"),
    ("hsdp_tp", "local"),
    ("fsdp_ep", "fake"),
    ("fsdp_ep", "local"),
    ("fsdp_tp_pp_1f1b", "fake"),
    ("fsdp_tp_pp_interleaved", "fake"),
]


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_example_has_no_findings_and_no_hang(workload, name, mode):
    trace, _ = workload(name, mode)
    assert run_checks(trace).findings == []
    report = analyze(trace)
    assert not report.hung and report.findings == []
