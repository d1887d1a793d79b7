"""Fake mode delivers the values a program reads back from small collectives (tracer/fake/
values.py): each rank's values are the ones worked out by hand for a real run (and real mode
gets the same), a large tensor stays mirrored, and a collective one rank alone issues falls
back to the mirrored result: recorded as a missing_collective, no hang."""

from __future__ import annotations

import json

import pytest
from conftest import program

from analyzer.checks import run_checks
from analyzer.loader import load
from tracer.program import Program
from tracer.record.pipeline import record
from tracer.record.request import RecordRequest


def _record(tmp_path, mode: str, *args: str):
    vals = tmp_path / f"values-{mode}"
    vals.mkdir()
    out = tmp_path / f"{mode}.trace"
    res = record(
        RecordRequest(
            program=Program(script=program("values_read_back"), args=[str(vals), *args]),
            world_size=4,
            out=str(out),
            mode=mode,
            progress=False,
            timeout=120,
        )
    )
    return res, out, {r: json.loads((vals / f"rank_{r}.json").read_text()) for r in range(4)}


def _expected(rank: int, *, big: float) -> dict:
    return {
        "broadcast_length": 3,
        "all_ranks_agree": False,  # rank 2 said no
        "max": [4.0, 10.0],
        "min": [1.0, 7.0],
        "product": [24.0, 10.0 * 9 * 8 * 7],
        "bor": 0b1111,
        "max_size": 8,
        "tokens": 7 * (1 + 2 + 3 + 4),
        "gathered_on_1": [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]] if rank == 1 else None,
        "scattered": 100.0 + rank,
        "big": big,
    }


@pytest.mark.parametrize("mode", ["fake", "real"])
def test_small_values_are_a_real_runs(tmp_path, mode):
    res, _, got = _record(tmp_path, mode)
    assert res.errors == {}
    for r in range(4):
        # a real run sums the 4 KiB tensor; fake mode leaves it mirrored (the rank's own data)
        assert got[r] == _expected(r, big=6.0 if mode == "real" else float(r)), r


def test_a_call_one_rank_alone_issues_falls_back_and_is_found(tmp_path):
    res, out, got = _record(tmp_path, "fake", "--bug", "rank0-extra")
    assert res.errors == {}
    (first, *_) = run_checks(load(str(out))).findings
    assert (first.kind.name, first.culprit_ranks) == ("missing_collective", [0])
    assert "values_read_back.py:42" in first.frames[0]
    # every rank ran to its end; the values before the skew are real ones, those after it have no
    # real counterpart (a real run hangs there) and are mirrored
    before = ["broadcast_length", "all_ranks_agree", "max", "min", "product", "bor", "max_size"]
    for r in range(4):
        assert {k: got[r][k] for k in before} == {k: _expected(r, big=0)[k] for k in before}, r
        assert got[r]["tokens"] == 7 * (r + 1), r
