"""Programs as people write them (torchrun env, init_process_group("nccl" | "gloo")), recorded in
fake mode and, where SPMD, local mode: exact comm patterns per group per step derived by hand
(see each program's docstring), no findings on the healthy ones, the seeded bug found (fake) or
refused (local)."""

import pytest
from conftest import stream

from analyzer.checks import run_checks
from analyzer.loader import load

SKIP_OPS = {"wait", "new_group", "mesh", "init_process_group", "redistribute", "split_group"}


def comm(t, rank):
    return [
        (e["op"], e["group"][0], e["group"][1], e["dtype"], e["in_shapes"], e["out_shapes"], e["reduce_op"], e["step"])
        for e in stream(t, rank)
        if e["op"] not in SKIP_OPS
    ]


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_fsdp2_on_transformer_encoder(recorded, mode):
    path, res = recorded("fsdp_transformer", 4, mode)
    assert res.errors == {}
    t = load(path)
    w, ag, rs = (
        (0, 1, 2, 3),
        ("all_gather_into_tensor", [[2136]], [[8544]]),
        ("reduce_scatter_tensor", [[8544]], [[2136]]),
    )
    for rank in range(4):
        want = []
        for step in range(2):
            gathers = [(ag[0], "dp", w, "float32", ag[1], ag[2], None, step)] * 4  # fwd 0, 1; bwd 1, 0
            scatters = [(rs[0], "dp", w, "float32", rs[1], rs[2], "avg", step)] * 2
            want += gathers + scatters
        assert comm(t, rank) == want
        units = [(e["phase"], e["module"]) for e in stream(t, rank) if e["op"] == "all_gather_into_tensor"][:4]
        assert units == [
            ("forward", "layers.0"),
            ("forward", "layers.1"),
            ("backward", "layers.1"),
            ("backward", "layers.0"),
        ]
    assert run_checks(t).findings == []


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_tensor_parallel_inside_fsdp_on_a_2d_mesh(recorded, mode):
    path, res = recorded("tp_fsdp_2d", 4, mode)
    assert res.errors == {}
    t = load(path)
    for rank in range(4):
        tp = (0, 1) if rank < 2 else (2, 3)
        dp = (rank % 2, rank % 2 + 2)
        want = [("scatter", "tp", tp, "float32", [] if rank != tp[0] else [[16, 16]] * 2, [[16, 16]], None, 0)] * 2
        for step in range(2):
            want += [
                ("all_gather_into_tensor", "dp", dp, "float32", [[256]], [[512]], None, step),
                ("all_reduce", "tp", tp, "float32", [[4, 16]], [[4, 16]], "sum", step),
                ("reduce_scatter_tensor", "dp", dp, "float32", [[512]], [[256]], "avg", step),
            ]
        assert comm(t, rank) == want, rank
    assert run_checks(t).findings == []


@pytest.mark.parametrize("mode", ["fake", "local"])
def test_dtensor_redistributions(recorded, mode):
    path, res = recorded("dtensor_redistribute", 4, mode)
    assert res.errors == {}
    t = load(path)
    w, f = (0, 1, 2, 3), "float32"
    for rank in range(4):
        tp, dp = ((0, 1) if rank < 2 else (2, 3)), (rank % 2, rank % 2 + 2)
        # Shard(0) -> Shard(1): on CPU torch all-gathers and keeps its chunk; under LocalTensor
        # it issues _dtensor.shard_dim_alltoall (torch's own choice, _collective_utils.py)
        s0_s1 = (
            ("all_gather_into_tensor", "tp", w, f, [[2, 8]], [[8, 8]], None, 0)
            if mode == "fake"
            else ("all_to_all_single", "tp", w, f, [[2, 8]], [[8, 2]], None, 0)
        )
        want = [
            ("scatter", "tp", w, f, [[2, 8]] * 4 if rank == 0 else [], [[2, 8]], None, 0),  # distribute
            ("all_gather_into_tensor", "tp", w, f, [[2, 8]], [[8, 8]], None, 0),  # S(0) -> R
            s0_s1,
            ("broadcast", "tp", w, f, [[8, 8]], [[8, 8]], None, 0),  # distribute Replicate
            ("all_reduce", "tp", w, f, [[8, 8]], [[8, 8]], "sum", 0),  # P -> R
            ("reduce_scatter_tensor", "tp", w, f, [[8, 8]], [[2, 8]], "sum", 0),  # P -> S(0)
            ("scatter", "dp", dp, f, [[4, 8]] * 2 if rank == dp[0] else [], [[4, 8]], None, 0),  # 2-D
            ("scatter", "tp", tp, f, [[4, 4]] * 2 if rank == tp[0] else [], [[4, 4]], None, 0),
            ("all_gather_into_tensor", "tp", tp, f, [[4, 4]], [[8, 4]], None, 0),  # [S(0), S(1)] -> [S(0), R]
            ("all_gather_into_tensor", "dp", dp, f, [[4, 8]], [[8, 8]], None, 0),
        ]  # -> [R, R]
        assert comm(t, rank) == want, rank
        moves = [(e["info"]["src"], e["info"]["dst"]) for e in stream(t, rank) if e["op"] == "redistribute"]
        assert moves == [
            (["S(0)"], ["R"]),
            (["S(0)"], ["S(1)"]),
            (["R"], ["S(1)"]),
            (["P(sum)"], ["R"]),
            (["P(sum)"], ["S(0)"]),
            (["S(0)", "S(1)"], ["R", "R"]),
        ]
    assert run_checks(t).findings == []


def test_rank0_extra_collective_found_in_fake_mode(recorded):
    t = load(recorded("bug_rank0_extra", 4, "fake")[0])
    findings = [f.to_json() for f in run_checks(t).findings]
    assert [(f["kind"], f["culprit_ranks"], f["seq"], f["op"]) for f in findings] == [
        ("missing_collective", [0], 1, "all_reduce")
    ]
    assert "bug_rank0_extra.py:15" in findings[0]["message"]


def test_rank0_extra_collective_refused_in_local_mode(recorded):
    path, res = recorded("bug_rank0_extra", 4, "local")
    assert set(res.errors) == {0, 1, 2, 3}
    assert (
        "depends on its rank ($RANK at tests/programs/bug_rank0_extra.py:9, branched on at "
        "tests/programs/bug_rank0_extra.py:13; rank 0 alone issues all_reduce at tests/programs/bug_rank0_extra.py:15)"
    ) in res.errors[0]
    assert "--mode fake" in res.errors[0]


def test_program_with_its_own_local_tensor_mode(recorded):
    path, res = recorded("local_tensor_own", 4, "local")
    assert res.errors == {}
    t = load(path)
    w, f = (0, 1, 2, 3), "float32"
    for rank in range(4):
        assert comm(t, rank) == [
            ("scatter", "tp", w, f, [[2, 4]] * 4 if rank == 0 else [], [[2, 4]], None, 0),
            ("all_gather_into_tensor", "tp", w, f, [[2, 4]], [[8, 4]], None, 0),
            ("all_reduce", "tp", w, f, [[3]], [[3]], "sum", 0),
        ]
    assert run_checks(t).findings == []
