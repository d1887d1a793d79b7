"""Coalesced collectives are recorded under the op torch dispatches (`_coalescing_manager`
issues c10d's *_coalesced ops even for one tensor), with one batch id per manager, in fake and
local mode; the checks find nothing in them and they replay on gloo."""

import pytest
from conftest import program, stream

from analyzer.checks import run_checks
from analyzer.loader import load
from tracer.replay.driver import replay

AG, RS, AR = "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"
COMM = (AG, AG + "_coalesced", RS, RS + "_coalesced", AR + "_coalesced")


def _fake_compute(tmp_path) -> str:
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    out = str(tmp_path / "coalesced-fake-compute.trace")
    res = record(
        RecordRequest(
            program=Program(script=program("coalesced")), world_size=4, out=out, compute="fake", progress=False
        )
    )
    assert res.errors == {}, res.errors
    return out


@pytest.mark.parametrize("mode", ["fake", "local", "fake compute"])
def test_coalescing_manager_records_the_coalesced_op_torch_dispatches(recorded, tmp_path, mode):
    # coalesced.py on 4 ranks, a = ones(4), b = ones(2), gathered into 16 / 8 elements. Each
    # manager issues one op at its exit, with its own batch id (0-4): the single all-gather,
    # reduce-scatter and all-reduce included; the async manager's op is waited by cm.wait().
    # Outside a manager: the plain c10d ops, the plain functional all-gather and
    # reduce_scatter_tensor_out (async, waited), the functional *_coalesced ones with one tensor
    # (async, waited), all_reduce_coalesced.
    if mode == "fake compute":
        path = _fake_compute(tmp_path)
    else:
        path, res = recorded("coalesced", 4, mode)
        assert res.errors == {}
    t = load(path)
    expected = [
        (AG + "_coalesced", 0, [[4]], [[16]], None, 0),
        (AG + "_coalesced", 1, [[4], [2]], [[16], [8]], None, 1),
        (RS + "_coalesced", 2, [[16]], [[4]], "sum", 0),
        (AR + "_coalesced", 3, [[4], [2]], [[4], [2]], "sum", 0),
        (AR + "_coalesced", 4, [[4]], [[4]], "sum", 0),
        (AG, -1, [[4]], [[16]], None, 0),
        (RS, -1, [[16]], [[4]], "sum", 0),
        (AG, -1, [[4]], [[16]], None, 1),
        (RS, -1, [[16]], [[4]], "sum", 1),
        (AG + "_coalesced", -1, [[4]], [[16]], None, 1),
        (RS + "_coalesced", -1, [[16]], [[4]], "sum", 1),
        (AR + "_coalesced", -1, [[4], [2]], [[4], [2]], "sum", 0),
    ]
    for rank in range(4):
        events = stream(t, rank)
        got = [
            (e["op"], e["batch"], e["in_shapes"], e["out_shapes"], e["reduce_op"], e["async_op"])
            for e in events
            if e["op"] in COMM
        ]
        assert got == expected
        waited = [events[e["ref"]]["op"] for e in events if e["op"] == "wait"]
        assert waited == [AG + "_coalesced", AG, RS, AG + "_coalesced", RS + "_coalesced"]
    assert run_checks(t).findings == []


def test_coalesced_trace_replays_on_gloo(recorded, tmp_path):
    path, _ = recorded("coalesced", 4, "fake")
    out = str(tmp_path / "replay.trace")
    res = replay(path, out=out, timeout=60)
    assert not res.hung and res.errors == {}
    src, t = load(path), load(out)
    assert run_checks(t).findings == []
    for rank in range(4):
        ops = [[e["op"] for e in stream(x, rank) if e["op"] in COMM] for x in (src, t)]
        assert ops[0] == ops[1]
