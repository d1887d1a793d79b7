"""`analyzer check`: every seeded bug is found with the right kind and culprits and nothing else;
healthy programs give zero findings in both modes."""

import json
import os
import subprocess

import pytest
from conftest import BIN

from analyzer.checks import run_checks
from analyzer.loader import load

# program, world size, kind, culprit ranks, seq (None: not applicable)
SEEDED = [
    ("rank_branch", 4, "missing_collective", [1], 1),  # rank-dependent extra collective
    ("bug_uneven_shard", 4, "shape_mismatch", [3], 1),  # last rank's shard one element short
    ("bug_dtype", 4, "dtype_mismatch", [2], 1),  # one rank in float64
    ("bug_reduce_op", 4, "reduce_op_mismatch", [3], 0),  # MAX instead of SUM
    ("bug_root", 4, "root_mismatch", [1], 0),  # wrong broadcast root
    ("bug_a2a_splits", 4, "split_mismatch", [2], 0),  # a2a splits that disagree
    ("bug_subgroup_skip", 8, "missing_collective", [5], 1),  # skip in a subgroup of a 2-D mesh
    ("bug_p2p_shape", 2, "p2p_mismatch", [0, 1], 0),  # send/recv of other shapes
    ("bug_recv_never_sent", 4, "unmatched_p2p", [3], 0),  # a recv never sent
    ("bug_p2p_wrong_peer", 4, "unmatched_p2p", [2], 0),  # a send to the wrong peer: one finding, the sender
    ("bug_group_order", 8, "group_mismatch", [5], None),  # subgroups created in another order
]


@pytest.mark.parametrize("name,world,kind,culprits,seq", SEEDED, ids=[s[0] for s in SEEDED])
def test_seeded_bug_found_with_right_kind_and_culprit_and_nothing_else(recorded, name, world, kind, culprits, seq):
    path, _ = recorded(name, world, "fake")
    found = run_checks(load(path)).findings
    assert [(f.kind.name, f.culprit_ranks, f.seq) for f in found] == [(kind, culprits, seq)], [f.message for f in found]
    (f,) = found
    assert set(f.culprit_ranks) <= set(f.ranks)
    j = f.to_json()
    for key in ("kind", "severity", "message", "ranks", "culprit_ranks", "group", "seq"):
        assert key in j
    assert f.group["ranks"] and f.group["label"]


def test_skip_reports_the_right_place_and_no_cascade(recorded):
    path, _ = recorded("bug_subgroup_skip", 8, "fake")
    (f,) = run_checks(load(path)).findings
    assert f.group["label"] == "tp" and f.group["ranks"] == [4, 5, 6, 7]
    assert f.detail == "skipped" and f.count == 1
    assert "skipped all_reduce #1" in f.message and "bug_subgroup_skip.py:14" in f.message


def test_rank_that_stops_is_one_finding_per_group(recorded):
    path, _ = recorded("raises", 4, "fake")
    found = run_checks(load(path)).findings
    assert [(f.kind.name, f.culprit_ranks, f.detail) for f in found] == [
        ("missing_collective", [2], "stopped"),
        ("failed_rank", [2], None),
    ]
    assert "ValueError: bad batch on rank 2" in found[0].message
    assert found[1].message.startswith("rank 2 raised: ValueError: bad batch on rank 2 (")


HEALTHY = [
    ("collectives", 4),
    ("fsdp", 4),
    ("tp", 4),
    ("dtensor", 4),
    ("groups", 8),
    ("a2a_splits", 4),
    ("p2p", 4),
    ("reduce", 4),
]


@pytest.mark.parametrize("mode", ["fake", "local"])
@pytest.mark.parametrize("name,world", HEALTHY, ids=[h[0] for h in HEALTHY])
def test_healthy_programs_have_no_findings(recorded, name, world, mode):
    path, res = recorded(name, world, mode)
    if res.errors:  # p2p, reduce and rank-dependent arguments are refused in local mode
        assert mode == "local" and name in ("p2p", "reduce", "collectives")
        return
    assert run_checks(load(path)).findings == []


@pytest.mark.parametrize("mode", ["fake", "local"])
@pytest.mark.records
def test_example_has_no_findings(tmp_path, mode):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = str(tmp_path / "ex.trace")
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "examples", "fsdp_tp.py")
    assert (
        record(RecordRequest(program=Program(script=example), world_size=4, out=out, mode=mode, progress=False)).errors
        == {}
    )
    assert run_checks(load(out)).findings == []


def test_cli_exit_codes_and_json(recorded, tmp_path):
    bad, _ = recorded("bug_dtype", 4, "fake")
    good, _ = recorded("fsdp", 4, "fake")
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", bad, "--json"], capture_output=True, text=True)
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert [f["kind"] for f in out["findings"]] == ["dtype_mismatch"] and out["findings"][0]["culprit_ranks"] == [2]
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", good], capture_output=True, text=True)
    assert p.returncode == 0 and "no findings" in p.stdout
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", bad],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert p.returncode == 1 and "dtype_mismatch" in p.stdout and "bug_dtype.py:7" in p.stdout
    junk = tmp_path / "junk.trace"
    junk.write_bytes(b"\x93\x01\x02")
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", str(junk)], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "Traceback" not in p.stderr


def test_missing_rank_is_noted_and_the_rest_checked(recorded, tmp_path):
    """A parts folder that lost one rank: the note names it; the others are still checked."""
    from traceformat import format as fmt
    from traceformat import parts as trace_parts
    from traceformat import reader as trace_reader

    path, _ = recorded("bug_dtype", 4, "fake")
    data = trace_reader.read_trace(path)
    for rank in (0, 1, 2):  # rank 3's part is lost
        part = fmt.TraceData(
            header=dict(data.header, ranks=[rank], part=True),
            atoms=data.atoms,
            groups=data.groups,
            columns={rank: data.columns[rank]},
            ends={rank: data.ends[rank]},
        )
        trace_parts.write_data(tmp_path / f"rank_{rank}.part", part)
    t = load(tmp_path)
    assert t.ranks == [0, 1, 2] and t.missing_ranks == [3]
    assert any("missing ranks" in n and "3" in n for n in t.notes)
    found = run_checks(t).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found] == [("dtype_mismatch", [2]), ("missing_rank", [3])]
    assert found[1].message == (
        "rank 3 left no events (its process most likely died before recording anything: see its log)"
    )
