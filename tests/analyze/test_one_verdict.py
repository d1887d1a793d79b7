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
    assert [(f.kind.name, f.culprit_ranks, f.detail, f.seq) for f in checked] == [
        ("missing_collective", [0], "extra", 1),
        ("missing_collective", [0], "extra", 5),
    ]
    assert all(f.frames[0].endswith("log_branch.py:12 in <module>") for f in checked)
    report = analyze(t)
    (root,) = report.findings
    assert (root.kind.name, root.culprit_ranks, root.seq) == ("missing_collective", [0], 1)
    assert root.waiting_ranks == [0] and "waiting for ranks 1-3" in root.message
    merged = build_report(t, ReportInputs(source=path)).findings
    assert [(f.kind.name, f.culprit_ranks, f.seq) for f in merged] == [
        (f.kind.name, f.culprit_ranks, f.seq) for f in checked
    ]
    p = subprocess.run([os.path.join(BIN, "analyzer"), "hang", path, "--json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert [(f["kind"], f["culprit_ranks"]) for f in out["findings"]] == [("missing_collective", [0])]


def _verdicts(found):
    return [(f.kind.name, f.culprit_ranks) for f in found]


def test_wrong_peer_is_one_verdict_naming_the_sender(recorded):
    """Rank 2 sends to 0 instead of 3: its unmatched send and rank 3's unmatched recv are one
    finding (culprit 2, the rank one fix would match both), not two; replayed, rank 2 blocks in
    the send and rank 0 in the barrier, a cycle through an op nobody matches: not an ordering
    deadlock, and not rank 0's fault. With small sends eager, the same verdict."""
    path, _ = recorded("bug_p2p_wrong_peer", 4, "fake")
    t = load(path)
    (f,) = run_checks(t).findings
    assert (f.kind.name, f.culprit_ranks, f.detail, f.meant_peer) == (
        "unmatched_p2p",
        [2],
        "wrong_peer",
        3,
    )
    assert f.frames[2].endswith("bug_p2p_wrong_peer.py:13 in <module>") and f.ranks == [0, 2, 3]
    for eager in (0, 1 << 20):
        report = analyze(t, eager_bytes=eager)
        assert _verdicts(report.findings) == [("unmatched_p2p", [2])] and not report.on_cycle
        assert report.findings[0].waiting_ranks == [0, 1, 2, 3]
    assert _verdicts(build_report(t, ReportInputs(source=path)).findings) == [("unmatched_p2p", [2])]


def test_unmatched_recv_is_the_root_cause_not_a_deadlock(recorded):
    """Rank 3 waits for a message rank 2 never sends, then everybody meets in a barrier: hang
    gave the cycle 2 <-> 3 (rank 2 in the barrier waiting for 3); it is check's unmatched_p2p."""
    path, _ = recorded("bug_recv_never_sent", 4, "fake")
    t = load(path)
    assert _verdicts(run_checks(t).findings) == [("unmatched_p2p", [3])]
    report = analyze(t)
    assert _verdicts(report.findings) == [("unmatched_p2p", [3])] and report.findings[0].waiting_ranks == [
        0,
        1,
        2,
        3,
    ]


def test_pipeline_skipped_send_hang_agrees_with_check(recorded):
    """The last stage (rank 3) never sends its last gradient: check names the recv left without a
    send on rank 1 (no majority between two parties; the op nobody matches); hang named rank 3,
    which finished its program, as stalled. Both now give check's finding, with ranks 0-1 waiting."""
    path, _ = recorded("pipeline", 4, "fake", args=("--bug", "skip"))
    t = load(path)
    checked = run_checks(t).findings
    assert _verdicts(checked) == [("unmatched_p2p", [1])]
    (root,) = analyze(t).findings
    assert (root.kind.name, root.culprit_ranks, root.waiting_ranks) == ("unmatched_p2p", [1], [0, 1])
    assert "waiting for rank 3" in root.message
