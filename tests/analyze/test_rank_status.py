"""A broken recording never passes CI: ranks that failed, were killed or timed out, or left no
events are `failed_rank` / `missing_rank` findings of check, hang and diff (exit 1); a trace
with no events at all is bad input (exit 2)."""

import json
import os
import subprocess

import pytest
from conftest import BIN, program

from analyzer.checks import run_checks
from analyzer.loader import load
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader


def cli(*args):
    return subprocess.run([os.path.join(BIN, "analyzer"), *map(str, args)], capture_output=True, text=True, timeout=300)


def _with_failed_rank(path, out):
    """The healthy recording, but rank 1's end record says its program raised after its last op."""
    data = trace_reader.read_trace(path)
    data.ends[1] = dict(data.ends[1], status="error", error="RuntimeError: CUDA out of memory (train.py:40 in step)")
    trace_parts.write_data(out, data)
    return out


def test_failed_rank_fails_check_hang_and_diff(recorded, tmp_path):
    path, _ = recorded("collectives", 4)
    bad = _with_failed_rank(path, tmp_path / "bad.trace")
    n = load(bad).status[1]["n"]
    message = (
        f"rank 1 raised: RuntimeError: CUDA out of memory (train.py:40 in step) ({n} events kept): the "
        "recording is incomplete, and what the other ranks did after that point may be its consequence"
    )
    p = cli("check", bad, "--json")
    assert p.returncode == 1
    (f,) = json.loads(p.stdout)["findings"]
    assert (f["kind"], f["culprit_ranks"], f["status"], f["message"]) == ("failed_rank", [1], "error", message)
    p = cli("hang", bad, "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["stuck_ranks"] == [] and [f["kind"] for f in out["findings"]] == ["failed_rank"]
    p = cli("hang", bad)
    assert p.returncode == 1 and "✗ 1 finding" in p.stdout and "no rank stuck" in p.stdout
    p = cli("diff", path, bad, "--json")
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["equal"] is True  # the same pattern, but B is incomplete
    assert out["incomplete"]["a"] == [] and [f["message"] for f in out["incomplete"]["b"]] == [message]
    assert cli("check", path).returncode == 0 and cli("diff", path, path).returncode == 0


@pytest.mark.records
def test_ranks_killed_at_the_timeout_are_named_with_why(tmp_path):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = tmp_path / "h.trace"
    res = record(
        RecordRequest(program=Program(script=program("hang")), world_size=2, out=str(out), timeout=4, progress=False)
    )
    assert sorted(res.errors) == [0, 1]
    t = load(out)
    why = "timed out after 4 s (killed; events up to then are kept)"
    status = t.header["rank_status"]
    assert {r: (s["status"], s["why"], s["at"]) for r, s in status.items()} == {
        r: ("timed_out", why, "tests/programs/hang.py:10 in <module>") for r in (0, 1)
    }
    assert all(s["stack"][0] == s["at"] for s in status.values())  # innermost frame first
    assert {r: s["status"] for r, s in t.status.items()} == {0: "timed_out", 1: "timed_out"} and t.truncated
    (f,) = run_checks(t).findings
    assert (f.kind.name, f.culprit_ranks) == ("failed_rank", [0, 1])
    assert f.message == (
        "ranks 0-1 timed out: timed out after 4 s (killed; events up to then are kept) (4 events "
        "kept): the recording is incomplete, and what the other ranks did after that point may be "
        "its consequence"
    )


def test_missing_ranks_with_their_reason(recorded, tmp_path):
    """Ranks the recorder says never started, and left nothing: one missing_rank with the reason."""
    path, _ = recorded("collectives", 4)
    data = trace_reader.read_trace(path)
    for r in (2, 3):
        del data.columns[r], data.ends[r]
    data.header["rank_status"] = {r: {"status": "not_started", "why": "Ray task failed: node lost"} for r in (2, 3)}
    trace_parts.write_data(tmp_path / "m.trace", data)
    p = cli("check", tmp_path / "m.trace", "--json")
    assert p.returncode == 1
    found = json.loads(p.stdout)["findings"]
    assert [(f["kind"], f["culprit_ranks"]) for f in found if f["kind"] == "missing_rank"] == [("missing_rank", [2, 3])]
    assert [f["message"] for f in found if f["kind"] == "missing_rank"] == [
        "ranks 2-3 left no events: it never ran (Ray task failed: node lost)"
    ]


def test_no_events_at_all_is_bad_input(recorded, tmp_path):
    path, _ = recorded("collectives", 4)
    cut = tmp_path / "cut.trace"
    cut.write_bytes(open(path, "rb").read()[:1000])
    for args in (["check", cut], ["hang", cut], ["diff", path, cut], ["summary", cut]):
        p = cli(*args)
        assert p.returncode == 2 and "Traceback" not in p.stderr
        assert p.stderr.strip().splitlines() == [
            f"error: {cut}: no events at all, nothing to analyse (missing ranks (no events): 0-3)"
        ]
