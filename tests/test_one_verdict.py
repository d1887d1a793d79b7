"""One verdict: on a dry run where rank 0 issues an extra all_reduce in a logging branch, `check`,
`hang` and `report` all name rank 0's extra op as the root cause (not ranks 1-3, which finish
their programs while the replayed rank 0 waits in a collective nobody else issues)."""

import json
import os
import subprocess

from conftest import BIN

from analyzer.checks import run_checks
from analyzer.hang import analyze
from analyzer.loader import load
from analyzer.report import ReportInputs, build_report


def test_extra_collective_is_the_root_cause_everywhere(recorded):
    path, _ = recorded("log_branch", 4, "fake")
    t = load(path)
    checked = run_checks(t).findings
    assert [(f.kind, f.culprit_ranks, f.extra["detail"], f.seq) for f in checked] == [
        ("missing_collective", [0], "extra", 1),
        ("missing_collective", [0], "extra", 5),
    ]
    assert all(f.frames[0].endswith("log_branch.py:12 in <module>") for f in checked)
    report = analyze(t)
    (root,) = report.findings
    assert (root.kind, root.culprit_ranks, root.seq) == ("missing_collective", [0], 1)
    assert root.extra["waiting_ranks"] == [0] and "waiting for ranks 1-3" in root.message
    merged = build_report(t, ReportInputs(source=path)).findings
    assert [(f.kind, f.culprit_ranks, f.seq) for f in merged] == [(f.kind, f.culprit_ranks, f.seq) for f in checked]
    p = subprocess.run([os.path.join(BIN, "analyzer"), "hang", path, "--json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert [(f["kind"], f["culprit_ranks"]) for f in out["findings"]] == [("missing_collective", [0])]
