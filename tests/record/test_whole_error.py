"""Errors keep their evidence (#38 item 6): a rank's error whose message has several lines is
kept whole in the trace (the end record's error_text), and the terminal shows its first line
and where the rest is. Expectations by hand from tests/programs/raises_multiline.py."""

import json
import os
import subprocess

from conftest import BIN, program

from analyzer.checks import run_checks
from analyzer.loader import load
from traceformat import format as fmt
from traceformat.reader import read_trace
from traceformat.writer import TraceWriter
from tracer.record.result import RankFailure, failure_lines

FIRST = (
    "RuntimeError: Detected a disagreement on list length between rank0 and rank2 "
    "(tests/programs/raises_multiline.py:14 in <module>)"
)
WHOLE = FIRST + "\n  rank0: 3\n  rank2: 4"


def test_a_many_line_error_is_kept_whole_and_said_in_one_line(tmp_path):
    out = tmp_path / "ml.trace"
    p = subprocess.run(
        [os.path.join(BIN, "tracer"), "record", "--script", program("raises_multiline"), "--world-size", "4"]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert (
        f"error: rank 2: {FIRST} (2 more lines of the error in the trace (analyzer check --json: error_text); log: "
        in p.stderr
    )
    assert "rank0: 3" not in p.stderr  # one line on the terminal
    ends = read_trace(str(out)).ends
    assert ends[2] == {"n": 2, "status": "error", "error": FIRST, "error_text": WHOLE}
    assert all(ends[r] == {"n": 3, "status": "ok", "error": None} for r in (0, 1, 3))  # no error_text key
    found = run_checks(load(str(out))).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found] == [("missing_collective", [2]), ("failed_rank", [2])]
    assert found[1].outcome.error == FIRST and found[1].outcome.error_text == WHOLE
    assert found[1].message.startswith(
        f"rank 2 raised: {FIRST} (2 events kept; 2 more lines of the error in error_text"
    )
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", str(out), "--json"], capture_output=True, text=True)
    failed = [f for f in json.loads(p.stdout)["findings"] if f["kind"] == "failed_rank"]
    assert [(f["error"], f["error_text"]) for f in failed] == [(FIRST, WHOLE)]


def test_a_one_line_error_has_no_error_text(tmp_path):
    path = tmp_path / "t.trace"
    w = TraceWriter(path, fmt.make_header(world_size=1, ranks=[0], mode="fake"))
    w.end(0, 0, "error", "ValueError: boom (t.py:1 in f)")
    w.footer()
    w.close()
    assert read_trace(str(path)).ends[0] == {"n": 0, "status": "error", "error": "ValueError: boom (t.py:1 in f)"}
    (f,) = run_checks(load(str(path))).findings
    assert f.outcome.error_text is None and "more line" not in f.message
    assert f.to_json()["error_text"] is None


def test_failure_line_says_where_the_rest_is():
    one = RankFailure(rank=1, why="ValueError: x", log="l1", ended=1.0)
    many = RankFailure(rank=2, why="RuntimeError: y", log="l2", ended=0.5, more=1)
    assert failure_lines({1: one}) == ["rank 1: ValueError: x (log: l1)"]
    assert failure_lines({2: many, 1: one})[0] == (
        "rank 2: RuntimeError: y (1 more line of the error in the trace (analyzer check --json: error_text); log: l2)"
    )
