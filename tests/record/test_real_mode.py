"""--mode real: a process per rank on real gloo. It is the truth the dry run answers to: on every
healthy program of the corpus below, the real recording has the same comm pattern as the fake
one, rank by rank (op, group, dtype, shapes, reduce op, root, peer, async), and no findings.

The ground truth is gloo itself: real_values.py asserts the values a torchrun job gets (a fake
backend fails its first assert), a rank that raises or stops is what gloo makes of it (its peers
fail or wait), and the hang post-mortem names the rank that stopped."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import one_line_error, program, run_tracer, sig, stream

from analyzer.checks import run_checks
from analyzer.compare.diff import diff_traces
from analyzer.loader import load

HEALTHY = [
    "ddp",
    "ddp_comm_hook",
    "fsdp",
    "fsdp_transformer",
    "tp",
    "tp_sequence",
    "tp_fsdp_2d",
    "dtensor",
    "dtensor_redistribute",
    "collectives",
    "coalesced",
    "reduce",
    "p2p",
    "pipeline",
    "pp_schedules",
    "objects",
    "a2a_splits",
    "gloo_side_groups",
]
"""Healthy programs of tests/programs that run under torchrun on a CPU (work_future.py is left
out: it asserts that an async Work is complete the moment it is issued, true of a fake backend
only)."""


def _pattern(trace, rank: int) -> list[tuple]:
    """The rank's communication, without waits (where a real wait falls is the program's timing)."""
    return [sig(e) for e in stream(trace, rank) if e["op"] != "wait"]


@pytest.mark.parametrize("name", HEALTHY)
def test_real_and_fake_record_the_same_comm(recorded, name):
    real_path, real_res = recorded(name, 4, "real")
    fake_path, fake_res = recorded(name, 4, "fake")
    assert real_res.errors == {} and fake_res.errors == {}, (real_res.errors, fake_res.errors)
    real, fake = load(real_path), load(fake_path)
    assert real.header["mode"] == "real"
    assert run_checks(real).findings == []
    assert diff_traces(real, fake).equal
    for r in range(4):
        assert _pattern(real, r) == _pattern(fake, r), r
    assert sum(len(_pattern(real, r)) for r in range(4)) > 0


def test_real_values_reach_the_program(recorded):
    """The program's own asserts on reduced, broadcast, gathered, sent and object values hold in
    real mode, and in fake mode too: its tensors are small, so their values travel between the
    rank processes (tracer/fake/values.py) where a fake backend echoes each rank's own data."""
    _, real = recorded("real_values", 4, "real")
    assert real.errors == {}
    _, fake = recorded("real_values", 4, "fake")
    assert fake.errors == {}


def test_async_waits_are_recorded_where_the_program_waits(recorded):
    """DDP's buckets: an async all_reduce per bucket, waited when backward ends, as in fake mode."""
    buckets = {}
    for mode in ("real", "fake"):
        events = stream(load(recorded("ddp", 4, mode)[0]), 0)
        buckets[mode] = [e["idx"] for e in events if e["op"] == "all_reduce" and e["async_op"]]
        asyncs = [e for e in events if e["async_op"]]
        waits = [e for e in events if e["op"] == "wait"]
        assert len(waits) == len(asyncs), mode
    assert len(buckets["real"]) >= 3 and buckets["real"] == buckets["fake"]  # a bucket at least per step


def test_a_rank_branch_runs_as_written(recorded):
    """Rank 1's extra all_reduce runs for real: gloo matches it with the others' next one, so rank
    1 ends waiting in its last all_reduce for peers that have exited (gloo: connection closed);
    the trace holds all three of its all_reduces and check names rank 1."""
    path, res = recorded("rank_branch", 4, "real")
    trace = load(path)
    assert [e["op"] for e in stream(trace, 1) if e["op"] != "wait"].count("all_reduce") == 3
    assert [e["op"] for e in stream(trace, 0)].count("all_reduce") == 2
    assert set(res.errors) == {1}
    findings = run_checks(trace).findings
    assert findings and all(f.culprit_ranks == [1] for f in findings if f.kind.name == "missing_collective")


def test_a_raising_rank_is_named_and_nothing_recorded_is_lost(recorded):
    path, res = recorded("raises", 4, "real")
    assert "ValueError: bad batch on rank 2" in res.errors[2]
    trace = load(path)
    assert sorted(trace.ranks) == [0, 1, 2, 3]
    assert all(len(stream(trace, r)) >= 1 for r in range(4))


def test_a_hang_times_out_and_the_post_mortem_names_the_stalled_rank(tmp_path):
    out = tmp_path / "hang.trace"
    p = run_tracer("tracer", "record", "--script", program("hang_one_rank"), "-n", "4", "--mode", "real",
                   "--timeout", "10", "-o", str(out))  # fmt: skip
    assert p.returncode == 2, p.stderr  # ranks failed: the partial trace is written, exit 2
    assert "timed out after 10 s" in p.stderr and "Traceback" not in p.stderr
    assert "error: ranks 0-3: timed out after 10 s" in p.stderr  # all four: none died of a peer killed first
    # while they wait (5 s in, before the kill), the three ranks in the all_reduce say whom they
    # wait for, on the terminal; rank 2, asleep in its own code, is in no op
    waits = sorted(re.sub(r" \(\d+ s so far\)$", "", line) for line in p.stderr.splitlines() if " waits in " in line)
    assert waits == [
        "rank 0 waits in all_reduce on group 0 (ranks 0-3) for ranks 1-3",
        "rank 1 waits in all_reduce on group 0 (ranks 0-3) for ranks 0, 2, 3",
        "rank 3 waits in all_reduce on group 0 (ranks 0-3) for ranks 0-2",
    ], p.stderr
    # each killed rank's log holds where it was stuck: rank 2 in its sleep, the others in the
    # all_reduce that waits for it (faulthandler, before SIGKILL); the trace holds the same stack
    status = load(str(out)).header["rank_status"]
    for r in range(4):
        log = open(f"{out}.parts/job_{r:05d}.log").read()
        assert f'hang_one_rank.py", line {12 if r == 2 else 13} in <module>' in log, (r, log)
        assert status[r]["at"].endswith(f"hang_one_rank.py:{12 if r == 2 else 13} in <module>"), status[r]
        first = status[r]["stack"][0]
        assert first == status[r]["at"] if r == 2 else first.startswith("tracer/real/backend.py:"), status[r]["stack"]
    h = run_tracer("analyzer", "hang", str(out), "--json")
    assert h.returncode == 1, h.stderr
    stalled = [f for f in json.loads(h.stdout)["findings"] if f["kind"] == "stalled_rank"]
    assert [f["culprit_ranks"] for f in stalled] == [[2]]
    assert "hang_one_rank.py:13" in stalled[0]["message"]
    assert stalled[0]["message"].endswith("hang_one_rank.py:12 in <module>"), stalled[0]["message"]


def test_fewer_jobs_than_ranks_is_refused_before_starting(tmp_path):
    out = tmp_path / "x.trace"
    p = run_tracer("tracer", "record", "--script", program("ddp"), "-n", "4", "--mode", "real", "-j", "2",
                   "-o", str(out))  # fmt: skip
    assert p.returncode == 2
    assert "--mode real runs all 4 ranks at once" in one_line_error(p)
    assert not os.path.exists(out) and not os.path.exists(f"{out}.parts")
