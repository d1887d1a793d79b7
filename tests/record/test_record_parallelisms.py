"""FSDP2, tensor + sequence parallel and DTensor redistribution: exact patterns derived by hand,
on every rank, in both modes."""

import pytest
from conftest import sig, stream

from analyzer.loader import load

AG, RS = "all_gather_into_tensor", "reduce_scatter_tensor"
MODES = ["fake", "local"]


def comm(t, rank):
    return [e for e in stream(t, rank) if e["op"] in (AG, RS, "all_reduce", "all_to_all_single", "scatter")]


@pytest.mark.parametrize("mode", MODES)
def test_fsdp2_all_gathers_and_reduce_scatters_per_unit_per_step(recorded, mode):
    # Three FSDP units (Linear 16x16: 256 + 16 = 272 parameters, 68 per rank on 4 ranks) under a
    # root without parameters, reshard_after_forward=True. Per step: forward all-gathers u0, u2,
    # u4; backward re-gathers u4, prefetches u2 before reducing u4, prefetches u0 before reducing
    # u2, reduces u0: 2N all-gathers and N reduce-scatters (avg) per step.
    path, res = recorded("fsdp", 4, mode)
    assert res.errors == {}
    t = load(path)
    # the world group is the 1-D mesh's dp_shard group, and is labelled by that dim
    dp = "dp_shard"
    ag = lambda seq, unit, phase, step: ((AG, dp, seq, -1, "float32", [[68]], [[272]], None, 0), unit, phase, step)
    rs = lambda seq, unit, step: ((RS, dp, seq, -1, "float32", [[272]], [[68]], "avg", 0), unit, "backward", step)
    expected = []
    for step in range(2):
        s = 9 * step
        expected += [
            ag(s, "0", "forward", step),
            ag(s + 1, "2", "forward", step),
            ag(s + 2, "4", "forward", step),
            ag(s + 3, "4", "backward", step),
            ag(s + 4, "2", "backward", step),
            rs(s + 5, "4", step),
            ag(s + 6, "0", "backward", step),
            rs(s + 7, "2", step),
            rs(s + 8, "0", step),
        ]
    for rank in range(4):
        got = [(sig(e), e["module"], e["phase"], e["step"]) for e in comm(t, rank)]
        assert got == expected


def test_fsdp2_without_reshard_skips_backward_all_gathers(recorded):
    path, _ = recorded("fsdp", 4, "fake", args=("--no-reshard",))
    t = load(path)
    for rank in range(4):
        got = [(e["op"], e["module"], e["phase"]) for e in comm(t, rank)]
        per_step = [
            (AG, "0", "forward"),
            (AG, "2", "forward"),
            (AG, "4", "forward"),
            (RS, "4", "backward"),
            (RS, "2", "backward"),
            (RS, "0", "backward"),
        ]
        assert got == per_step * 2


@pytest.mark.parametrize("mode", MODES)
def test_tensor_and_sequence_parallel(recorded, mode):
    # parallelize_module scatters w1 (32x16, Shard(0)) and w2 (16x32, Shard(1)) from rank 0. Per
    # step: w1's sequence-sharded input (2, 4, 16) is all-gathered (gather dim 1 goes through
    # dim 0: (8, 4, 16)); w2's partial output (2, 16, 16) is reduce-scattered to (2, 4, 16); in
    # backward the output gradient is all-gathered again (x needs no grad: no 4th collective).
    path, res = recorded("tp", 4, mode)
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        got = [sig(e) for e in comm(t, rank)]
        root = rank == 0
        setup = [
            ("scatter", "tp", 0, 0, "float32", [[8, 16]] * 4 if root else [], [[8, 16]], None, 0),
            ("scatter", "tp", 1, 0, "float32", [[16, 8]] * 4 if root else [], [[16, 8]], None, 0),
        ]
        step = lambda s: [
            (AG, "tp", s, -1, "float32", [[2, 4, 16]], [[8, 4, 16]], None, 1),
            (RS, "tp", s + 1, -1, "float32", [[8, 4, 16]], [[2, 4, 16]], "sum", 1),
            (AG, "tp", s + 2, -1, "float32", [[2, 4, 16]], [[8, 4, 16]], None, 1),
        ]
        assert got == setup + step(2) + step(5)
        phases = [e["phase"] for e in comm(t, rank)][2:]
        assert phases == ["forward", "forward", "backward"] * 2
        assert [e["module"] for e in comm(t, rank)][2] == "w1"
        # every TP collective was issued by a DTensor redistribution, and linked to it
        events = stream(t, rank)
        for e in comm(t, rank)[2:]:
            parent = events[e["parent"]]
            assert parent["op"] == "redistribute"


@pytest.mark.parametrize("mode", MODES)
def test_dtensor_redistribute_shard_to_replicate(recorded, mode):
    path, _ = recorded("dtensor", 4, mode)
    t = load(path)
    for rank in range(4):
        ev = stream(t, rank)
        (red,) = [e for e in ev if e["op"] == "redistribute"]
        assert red["info"] == {"mesh": ["tp"], "mesh_shape": [4], "src": ["S(0)"], "dst": ["R"], "shape": [8, 6]}
        assert red["in_shapes"] == [[2, 6]] and red["dtype"] == "float32"
        (ag,) = [e for e in ev if e["op"] == AG]
        assert ag["parent"] == red["idx"]
        assert sig(ag) == (AG, "tp", 1, -1, "float32", [[2, 6]], [[8, 6]], None, 1)
        (wait,) = [e for e in ev if e["op"] == "wait"]
        assert wait["ref"] == ag["idx"]


@pytest.mark.parametrize("mode", MODES)
def test_rank_dependent_all_to_all_splits(recorded, mode):
    # rank r sends (r + j) % 3 + 1 rows to rank j; LocalTensor gives each rank its own split sizes
    path, _ = recorded("a2a_splits", 4, mode)
    t = load(path)
    for rank in range(4):
        (e,) = [e for e in stream(t, rank) if e["op"] == "all_to_all_single"]
        splits = [(rank + j) % 3 + 1 for j in range(4)]
        assert e["splits"] == [splits, splits]
        assert e["in_shapes"] == [[sum(splits), 4]] and e["out_shapes"] == [[sum(splits), 4]]
