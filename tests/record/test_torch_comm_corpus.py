"""The torch communication corpus: programs rebuilt from PyTorch's own communication-count tests
(tests/programs/torch_comm/), recorded in fake and in local mode. Per window (the `step` column:
each script steps an empty optimizer around what the peer test runs under CommDebugMode), the
collectives per op and per module are exactly the numbers the peer test asserts; every recorded
collective matches torch's own CommDebugMode on torch's fake process group
(bench/torch_comm_truth.py), op, direction, module and order; and `analyzer check` is clean.

Peer tests: pytorch/pytorch test/distributed/..., read at the commits named in TESTS (the
versions nearest torch 2.13; every assertion cited was checked against the installed torch by
the ground truth). docs/torch-comm-corpus.md has the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

import pytest
from conftest import REPO, program, run_tracer, stream

from analyzer.loader import load
from traceformat.ops import COLLECTIVE_OPS

AR, AG, RS, A2A = "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"
MODES = ["fake", "local"]
SCRIPTS = {  # corpus script -> world size (the peer test's, or 4)
    "redistribute": 4,
    "comm_mode": 2,
    "comm_mode_rooted": 2,
    "comm_mode_features": 4,
    "tp_style": 4,
    "tp_examples": 4,
    "math_ops": 4,
    "fsdp_comm": 4,
}
TESTS = {  # corpus script -> the peer test file @ the commit read
    "redistribute": "test/distributed/tensor/test_redistribute.py @0133e92",
    "comm_mode": "test/distributed/tensor/debug/test_comm_mode.py @02dd4ff",
    "comm_mode_rooted": "test/distributed/tensor/debug/test_comm_mode.py @02dd4ff",
    "comm_mode_features": "test/distributed/tensor/debug/test_comm_mode_features.py @01f9ef3",
    "tp_style": "test/distributed/tensor/parallel/test_tp_style.py @02dd4ff",
    "tp_examples": "test/distributed/tensor/parallel/test_tp_examples.py @02dd4ff",
    "math_ops": "test/distributed/tensor/test_math_ops.py @0088381",
    "fsdp_comm": "test/distributed/_composable/fsdp/test_fully_shard_comm.py @01d5c2c",
}
# Windows where torch itself takes another path under LocalTensorMode: DTensor's shard_dim_alltoall
# gathers and chunks on a CPU mesh (the peer test's CPU branch, and torch's fake process group),
# but runs its all-to-all under LocalTensorMode (the peer's accelerator branch)
LOCAL_PATH = {("redistribute", 11), ("redistribute", 13), ("redistribute", 15), ("redistribute", 17)}
# Programs that branch on their rank (torch wants gather's / scatter's list on the root only):
# local mode runs rank 0's Python for every rank and refuses them in one line (test_local_refuses)
FAKE_ONLY = {"comm_mode_rooted"}
# FSDP: commtrace files an FSDP collective under its FSDP unit (the param group it moves);
# CommDebugMode under whichever module ran last (in backward, a leaf inside the unit): modules
# are compared with the ground truth everywhere else
UNIT_ATTRIBUTION = {"fsdp_comm"}


@dataclass(frozen=True)
class Window:
    script: str
    step: int
    peer: str
    """The peer test (and the assertion) the numbers come from."""
    counts: dict[str, dict[str, int]]
    """Direction ("forward": not in backward, as CommDebugMode splits them; "backward";
    "optimizer": an optimizer's step, which the peer counts apart) -> op -> count: every
    collective of the window, exactly."""
    local_counts: dict[str, dict[str, int]] | None = None
    """Local mode's, where torch takes another path under LocalTensorMode (LOCAL_PATH)."""
    root: str = ""
    """The root module's class name (CommDebugMode's first FQN component)."""
    modules: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """CommDebugMode's comm_module_counts entries the peer asserts: "Root.a.b" (or "Global") ->
    direction -> op -> count, a module counting its descendants' collectives."""
    units: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """commtrace's own module column (exclusive): FQN -> direction -> op -> count."""


F, B, OPT = "forward", "backward", "optimizer"
W = Window
WINDOWS = [
    # test_redistribute.py
    W(
        "redistribute",
        1,
        "test_shard_to_replicate_forward_backward: all_gather_into_tensor 1; backward total 0",
        {F: {AG: 1}},
    ),
    W(
        "redistribute",
        3,
        "test_replicate_to_shard_forward_backward: total 0; backward total 1, all_gather 1",
        {B: {AG: 1}},
    ),
    W("redistribute", 5, "test_partial_to_replicate_forward_backward: all_reduce 1; backward total 0", {F: {AR: 1}}),
    W("redistribute", 7, "test_replicate_to_local_partial_grad: total 1, all_reduce 1", {B: {AR: 1}}),
    W("redistribute", 9, "test_partial_to_shard: reduce_scatter_tensor 1", {F: {RS: 1}}),
    W(
        "redistribute",
        11,
        "test_redistribute_shard_dim_change 1-D: CPU all_gather_into_tensor 1 / accelerator shard_dim_alltoall 1",
        {F: {AG: 1}},
        local_counts={F: {A2A: 1}},
    ),
    W(
        "redistribute",
        13,
        "test_redistribute_shard_dim_change 2-D [S0,S1]->[S0,S0]: total 1 ('1: S1 -> S0')",
        {F: {AG: 1}},
        local_counts={F: {A2A: 1}},
    ),
    W(
        "redistribute",
        15,
        "test_redistribute_shard_dim_change 2-D [S0,S1]->[S1,S0]: total 2 ('1: S1 -> R, 0: S0 -> S1, 1: R -> S0')",
        {F: {AG: 2}},
        local_counts={F: {AG: 1, A2A: 1}},
    ),
    W(
        "redistribute",
        17,
        "test_redistribute_shard_dim_change 2-D [S0,S0]->[S1,S1]: total 2 ('1: S0 -> R, 0: S0 -> S1, 1: R -> S1')",
        {F: {AG: 2}},
        local_counts={F: {AG: 1, A2A: 1}},
    ),
    W("redistribute", 19, "test_one_chunk_mesh: total 0", {}),
    # test_comm_mode.py
    W(
        "comm_mode",
        1,
        "test_comm_mode: total 3, all_reduce 1, all_gather_into_tensor 1, reduce_scatter_tensor 1",
        {F: {AR: 1, AG: 1, RS: 1}},
        root="WrapperModel",
        modules={"WrapperModel": {F: {AR: 1, AG: 1, RS: 1}}},
    ),
    W(
        "comm_mode",
        3,
        "test_comm_mode_coalesced: total 3, all_reduce_coalesced 1, all_gather 1, reduce_scatter 1",
        {F: {"all_reduce_coalesced": 1, AG: 1, RS: 1}},
        root="WrapperModelCoalesced",
    ),
    W("comm_mode", 5, "test_comm_mode_with_dtensor: total 1, all_gather_into_tensor 1", {F: {AG: 1}}),
    *[
        W("comm_mode", step, f"test_comm_mode_with_c10d: {c10d} 1, total 1", {F: {op: 1}})
        for step, (c10d, op) in enumerate(
            [
                ("allreduce_", AR),
                ("_allgather_base_", AG),
                ("_reduce_scatter_base_", RS),
                ("broadcast_", "broadcast"),
                ("reduce_", "reduce"),
                ("allgather_", "all_gather"),
                ("allgather_coalesced_", "all_gather_coalesced"),
                ("allgather_into_tensor_coalesced_", "all_gather_into_tensor_coalesced"),
                ("allreduce_coalesced_", "all_reduce_coalesced"),
                ("reduce_scatter_", "reduce_scatter"),
                ("reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced"),
                ("alltoall_", "all_to_all"),
                ("alltoall_base_", A2A),
            ],
            start=6,
        )
    ],
    W("comm_mode_rooted", 0, "test_comm_mode_with_c10d: gather_ 1, total 1", {F: {"gather": 1}}),
    W("comm_mode_rooted", 1, "test_comm_mode_with_c10d: scatter_ 1, total 1", {F: {"scatter": 1}}),
    # test_comm_mode_features.py
    W(
        "comm_mode_features",
        1,
        "test_MLP_module_tracing: comm_module_counts Global / MLPModule / MLPModule.net2 forward all_reduce 1",
        {F: {AR: 1}},
        root="MLPModule",
        modules={"Global": {F: {AR: 1}}, "MLPModule": {F: {AR: 1}}, "MLPModule.net2": {F: {AR: 1}}},
    ),
    W(
        "comm_mode_features",
        3,
        "test_transformer_module_tracing: Global / Transformer forward all_reduce 6, all_gather 1; per leaf",
        {F: {AR: 6, AG: 1}},
        root="Transformer",
        modules={
            "Global": {F: {AR: 6, AG: 1}},
            "Transformer": {F: {AR: 6, AG: 1}},
            "Transformer.tok_embeddings": {F: {AR: 1}},
            "Transformer.pos_embeddings": {F: {AR: 1}},
            **{
                f"Transformer.layers.{i}{leaf}": {F: {AR: n}}
                for i in (0, 1)
                for leaf, n in (
                    ("", 2),
                    (".attention", 1),
                    (".attention.wo", 1),
                    (".feed_forward", 1),
                    (".feed_forward.w2", 1),
                )
            },
            "Transformer.output": {F: {AG: 1}},
        },
    ),
    # test_tp_style.py (the root is the parallelized module itself)
    W("tp_style", 1, "test_colwise_parallel_style: total 0; backward all_reduce 1", {B: {AR: 1}}, root="Linear"),
    W(
        "tp_style",
        3,
        "test_colwise_parallel_style Shard(0) input: all_gather 1; backward reduce_scatter 1, total 2",
        {F: {AG: 1}, B: {RS: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        5,
        "test_rowwise_parallel_style: all_reduce 1, total 1; backward total 1",
        {F: {AR: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        7,
        "test_rowwise_parallel_style Shard(0) output: reduce_scatter 1; backward all_gather 1, total 2",
        {F: {RS: 1}, B: {AG: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        9,
        "test_rowwise_parallel_embedding: total 1, all_reduce 1; backward total 1",
        {F: {AR: 1}},
        root="Embedding",
    ),
    W(
        "tp_style",
        11,
        "test_rowwise_parallel_embedding Shard(1) output: reduce_scatter 1; backward all_gather 1, total 2",
        {F: {RS: 1}, B: {AG: 1}},
        root="Embedding",
    ),
    W("tp_style", 13, "test_prepare_module_kwargs_input: total 1", {F: {AG: 1}}, root="TestKwargModule"),
    W("tp_style", 15, "test_sequence_parallel_style LayerNorm: total 0", {}, root="LayerNorm"),
    # test_tp_examples.py
    W("tp_examples", 1, "test_mlp_training plain TP: all_reduce 1", {F: {AR: 1}}, root="MLPModule"),
    W(
        "tp_examples",
        3,
        "test_mlp_training sequence parallel: all_gather_into_tensor 2, reduce_scatter_tensor 1",
        {F: {AG: 1, RS: 1}, B: {AG: 1}},
        root="MLPModule",
    ),
    W(
        "tp_examples",
        5,
        "test_transformer_training EXP_BASE_CC: fwd {all_reduce: 6, all_gather: 1}, bwd {all_reduce: 9}, optim {}",
        {F: {AR: 6, AG: 1}, B: {AR: 9}},
        root="Transformer",
    ),
    W(
        "tp_examples",
        7,
        "test_transformer_training EXP_SEQ_PARALLEL_CC: fwd {rs 6, ag 6}, bwd {rs 5, ag 6}, optim {all_reduce: 30}",
        {F: {RS: 6, AG: 6}, B: {RS: 5, AG: 6}, OPT: {AR: 30}},
        root="Transformer",
    ),
    W("tp_examples", 9, "test_loss_parallel: total 3, all_reduce 3; backward total 0", {F: {AR: 3}}),
    # test_math_ops.py
    W(
        "math_ops",
        1,
        "test_layer_norm_bwd shard_dim >= norm_idx: Global forward 1, backward 1",
        {F: {AG: 1}, B: {AG: 1}},
        root="LayerNorm",
        modules={"Global": {F: {AG: 1}, B: {AG: 1}}},
    ),
    W(
        "math_ops",
        3,
        "test_layer_norm_bwd shard_dim < norm_idx: Global forward 0, backward 0",
        {},
        root="LayerNorm",
    ),
    W(
        "math_ops",
        5,
        "test_nll_loss_and_cross_entropy, class-sharded: total 1, all_gather_into_tensor 1",
        {F: {AG: 1}},
    ),
    # test_fully_shard_comm.py: num_blocks 2, so num_blocks + 1 FSDP units
    *[
        W(
            "fsdp_comm",
            step,
            f"test_fully_shard_communication_count reshard_after_forward={raf}: forward _allgather_base_ 3; "
            f"backward _allgather_base_ {bwd_ag}, _reduce_scatter_base_ 3",
            {F: {AG: 3}, B: {AG: bwd_ag, RS: 3} if bwd_ag else {RS: 3}},
            units={
                "": {F: {AG: 1}, B: {AG: 1, RS: 1} if raf not in (False, None) else {RS: 1}},
                **{f"layers.{i}": {F: {AG: 1}, B: {AG: 1, RS: 1} if raf is not False else {RS: 1}} for i in (0, 1)},
            },
        )
        for step, raf, bwd_ag in ((1, True, 3), (3, False, 0), (5, 2, 3), (7, None, 2))
    ],
]


def direction(phase: str) -> str:
    return phase if phase in (B, OPT) else F


def window_events(t, rank: int, step: int) -> list[dict]:
    return [e for e in stream(t, rank) if e["step"] == step and e["op"] in COLLECTIVE_OPS]


def counts_of(events) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for e in events:
        out.setdefault(direction(e["phase"]), Counter())[e["op"]] += 1
    return {d: dict(c) for d, c in out.items()}


def module_counts(events, root: str) -> dict[str, dict[str, Counter]]:
    """CommDebugMode's comm_module_counts from commtrace's module column: "Global" counts every
    collective, a module its own and its descendants' (optimizer steps count as forward)."""
    out: dict[str, dict[str, Counter]] = {}
    for e in events:
        names = ["Global"]
        module = e["module"]
        if module:
            names.append(root)
            if module != root:
                parts = module.split(".")
                names += [".".join([root, *parts[: i + 1]]) for i in range(len(parts))]
        way = B if e["phase"] == B else F
        for name in names:
            out.setdefault(name, {}).setdefault(way, Counter())[e["op"]] += 1
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(script, mode) -> (path, loaded trace, RecordResult): one recording per script and mode."""
    from tracer.record.pipeline import record
    from tracer.record.program import Program
    from tracer.record.request import RecordRequest

    cache: dict = {}
    root = tmp_path_factory.mktemp("corpus")

    def get(script: str, mode: str):
        if (script, mode) not in cache:
            path = str(root / f"{script}-{mode}.trace")
            request = RecordRequest(
                program=Program(script=program("torch_comm/" + script), args=[]),
                world_size=SCRIPTS[script],
                out=path,
                mode=mode,
                progress=False,
            )
            res = record(request)
            cache[script, mode] = (path, load(path) if os.path.exists(path) else None, res)
        return cache[script, mode]

    return get


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """(script, rank) -> the collectives torch's CommDebugMode counts (bench/torch_comm_truth.py)."""
    cache: dict = {}
    root = tmp_path_factory.mktemp("truth")

    def get(script: str, rank: int) -> list[dict]:
        if (script, rank) not in cache:
            out = root / f"{script}-{rank}.json"
            env = dict(os.environ, PYTHONPATH=REPO)
            cmd = [sys.executable, os.path.join(REPO, "bench", "torch_comm_truth.py"), program("torch_comm/" + script)]
            p = subprocess.run(
                [*cmd, "--rank", str(rank), "-n", str(SCRIPTS[script]), "-o", str(out)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            assert p.returncode == 0, p.stderr[-3000:]
            cache[script, rank] = json.loads(out.read_text())
        return cache[script, rank]

    return get


def modes_of(script: str) -> list[str]:
    return ["fake"] if script in FAKE_ONLY else MODES


@pytest.mark.parametrize(
    "w,mode", [pytest.param(w, m, id=f"{w.script}-{w.step}-{m}") for w in WINDOWS for m in modes_of(w.script)]
)
def test_peer_counts(corpus, w: Window, mode):
    # every rank of the window holds exactly the peer test's collectives per op and direction
    _, t, res = corpus(w.script, mode)
    assert res.errors == {}, res.errors
    expected = w.local_counts if mode == "local" and w.local_counts is not None else w.counts
    for rank in t.ranks:
        events = window_events(t, rank, w.step)
        assert counts_of(events) == {d: c for d, c in expected.items() if c}, (rank, w.peer)
        got = module_counts(events, w.root)
        for name, ways in w.modules.items():
            for way, ops in ways.items():
                for op, n in ops.items():
                    assert got.get(name, {}).get(way, Counter())[op] == n, (rank, name, way, op, w.peer)
        units: dict[str, dict[str, Counter]] = {}
        for e in events:
            units.setdefault(e["module"], {}).setdefault(direction(e["phase"]), Counter())[e["op"]] += 1
        for unit, ways in w.units.items():
            assert {d: dict(c) for d, c in units.get(unit, {}).items()} == ways, (rank, unit, w.peer)


@pytest.mark.parametrize("script,mode", [(s, m) for s in SCRIPTS for m in modes_of(s)])
def test_matches_comm_debug_mode(corpus, truth, script, mode):
    # every collective CommDebugMode counts, in program order: step, direction, module, op
    _, t, res = corpus(script, mode)
    assert res.errors == {}, res.errors
    counted = COLLECTIVE_OPS - {"barrier"}  # what CommDebugMode counts
    for rank in (0, 1):
        want = truth(script, rank)
        got = [e for e in stream(t, rank) if e["op"] in counted]
        if mode == "local":  # torch's own other path (LOCAL_PATH): asserted by test_peer_counts
            want = [e for e in want if (script, e["step"]) not in LOCAL_PATH]
            got = [e for e in got if (script, e["step"]) not in LOCAL_PATH]
        key = (
            (lambda e: (e["step"], direction(e["phase"]) if e["phase"] != OPT else F, e["op"]))
            if (script in UNIT_ATTRIBUTION)
            else (lambda e: (e["step"], direction(e["phase"]) if e["phase"] != OPT else F, e["module"], e["op"]))
        )
        assert [key(e) for e in got] == [key(e) for e in want], (script, rank)


@pytest.mark.parametrize("script,mode", [(s, m) for s in SCRIPTS for m in modes_of(s)])
def test_check_is_clean(corpus, script, mode):
    path, _, res = corpus(script, mode)
    assert res.errors == {}, res.errors
    p = run_tracer("analyzer", "check", path)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("script", sorted(FAKE_ONLY))
def test_local_refuses(corpus, script):
    # a fake-only program: local mode says why in one line on every rank, and records no collective
    _, _, res = corpus(script, "local")
    assert res.errors.keys() == set(range(SCRIPTS[script]))
    assert all("RankDependent: the program's behaviour depends on its rank" in e for e in res.errors.values())
