"""torchao's rowwise float8 recipes in the built-in workload (`[quantize.linear.float8] recipe_name =
"rowwise"` / `"rowwise_with_gw_hp"`: Float8LinearConfig.from_recipe_name, as TorchTitan builds it),
the exact collectives derived by hand from torchao's code; tests/torchtitan/test_torchtitan_float8.py
compares "rowwise" with TorchTitan 0.3 itself.

The model of test_workload_float8.py (dim 64, 4 heads, FFN 192, vocab 128, 2 blocks; fsdp 2 x tp 2,
seq 16, local batch 2, no AC), every Linear converted (no filter_fqns: `output` too). A rowwise
recipe communicates no float8 at all: FSDP all-gathers the bf16 weights (torchao's float8
all-gather is tensorwise only), TP keeps the plain styles (TorchTitan's parallelize_llama), no
precomputed scales. What it adds are the amaxes of casts whose scaling axis crosses a tp-sharded
dim: DTensor takes the amax as Partial(max) and all-reduces it over tp, in float64 (amax_to_scale
upcasts before the Partial resolves)."""

import importlib.util

import pytest
from conftest import run_tracer, stream

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")

TOML = """
[model]
dim = 64
n_layers = 2
n_heads = 4
vocab_size = 128
converters = ["float8"]
[training]
seq_len = 16
local_batch_size = 2
steps = 2
[activation_checkpoint]
mode = "none"
[parallelism]
data_parallel_shard_degree = 2
tensor_parallel_degree = 2
[quantize.linear.float8]
recipe_name = "{recipe}"
[tracer]
world_size = 4
"""
COMM = ("all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor")
RECIPES = ("rowwise", "rowwise_with_gw_hp")
COLWISE = ("feed_forward.w3", "feed_forward.w1", "attention.wv", "attention.wk", "attention.wq")
"""Colwise Linears in backward order (w2's gradient reaches w3 and w1; wo's reaches wv, wk, wq)."""


def facts(t, rank: int) -> list[tuple]:
    return [
        (e["step"], e["phase"], e["group"][0], e["op"], e["dtype"], e["out_bytes"], e["reduce_op"], e["module"])
        for e in stream(t, rank, COMM)
    ]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from analyzer.loader import load

    d = tmp_path_factory.mktemp("f8rw")
    out = {}
    for recipe in RECIPES:
        (d / f"{recipe}.toml").write_text(TOML.format(recipe=recipe))
        for compute in ("real", "fake"):
            path = str(d / f"{recipe}-{compute}.trace")
            p = run_tracer("tracer", "record", str(d / f"{recipe}.toml"), "--compute", compute, "-o", path)
            assert p.returncode == 0, p.stderr
            out[recipe, compute] = load(path)
    return out


def amax(bytes_: int, module: str) -> tuple:
    return ("tp", "all_reduce", "float64", bytes_, "max", module)


@pytest.mark.parametrize("recipe", RECIPES)
def test_rowwise_fsdp_and_tp_stay_bf16(traces, recipe):
    # FSDP all-gather of a block: its 7 Linears (4 x 64x64, 3 x 192x64 = 53248) / tp 2 + the two
    # norms (64 each, replicated over tp) = 26752 bf16 elements: 53504 bytes out per rank (the
    # tensorwise recipe's float8 all-gather: 26880 in one uint8 buffer). TP: the plain
    # sequence-parallel all-gathers of (2, 8, 64) bf16, 4096 bytes out, no amax before them.
    for rank in range(4):
        f = facts(traces[recipe, "real"], rank)
        assert not [x for x in f if x[4].startswith("float8") or x[4] == "uint8"]
        assert not [x for x in f if x[2] == "fsdp" and x[6] == "max"]
        fsdp_fwd = [x[5] for x in f if x[1] == "forward" and x[2] == "fsdp"]
        assert fsdp_fwd == [8192, 53504, 53504, 8320] * 2  # tok_embeddings, 2 blocks, [norm, output]
        tp_ag = [x[4:6] for x in f if x[1] == "forward" and x[2] == "tp" and x[3] == "all_gather_into_tensor"]
        assert tp_ag == [("bfloat16", 4096)] * 5 * 2  # 2 regions x 2 blocks + output's input, 2 steps
        # no precomputed scales: the only other max all-reduces are the loss's (logged, loss-parallel)
        assert {(x[2], x[4], x[5]) for x in f if x[1] == "other" and x[6] == "max"} == {
            ("loss_mesh", "float32", 4),
            ("tp", "float32", 128),
        }


@pytest.mark.parametrize("recipe", RECIPES)
def test_rowwise_amax_all_reduces_are_the_tp_sharded_axes(traces, recipe):
    # forward, both recipes: wo and w2 (RowwiseParallel) cast their Shard(-1) input per row (2 x 16
    # rows: 256 bytes) and their Shard(1) weight per output row (64: 512 bytes); colwise Linears
    # scale along unsharded axes: nothing.
    # backward, "rowwise": each colwise Linear (and `output`, loss-parallel) casts its Shard(-1)
    # output gradient per row (256) and its Shard(0) weight per input row for grad_input (64: 512);
    # "rowwise_with_gw_hp": the same gradient rows (256), but the weight for grad_input is tensorwise:
    # one scalar (8 bytes) on every sharded weight, wo and w2 included; grad_weight stays high
    # precision (no cast).
    for rank in range(4):
        f = facts(traces[recipe, "real"], rank)
        for step in (0, 1):
            got = {
                phase: [x[2:] for x in f if x[0] == step and x[1] == phase and x[6] == "max" and x[4] == "float64"]
                for phase in ("forward", "backward")
            }
            blocks = (1, 0)
            assert got["forward"] == [
                amax(b, f"layers.{i}.{w}")
                for i in (0, 1)
                for w in ("attention.wo", "feed_forward.w2")
                for b in (256, 512)
            ], (recipe, rank, step)
            if recipe == "rowwise":
                bwd = [amax(b, "output") for b in (256, 512)]
                for i in blocks:
                    bwd += [amax(b, f"layers.{i}.{w}") for w in COLWISE for b in (256, 512)]
            else:
                bwd = [amax(256, "output"), amax(8, "output")]
                for i in blocks:
                    ffn, attn = COLWISE[:2], COLWISE[2:]
                    bwd += [amax(8, f"layers.{i}.feed_forward.w2")]
                    bwd += [amax(b, f"layers.{i}.{w}") for w in ffn for b in (256, 8)]
                    bwd += [amax(8, f"layers.{i}.attention.wo")]
                    bwd += [amax(b, f"layers.{i}.{w}") for w in attn for b in (256, 8)]
            assert got["backward"] == bwd, (recipe, rank, step)


@pytest.mark.parametrize("recipe", RECIPES)
def test_rowwise_fake_compute_records_what_real_compute_does(traces, recipe):
    from analyzer.checks import run_checks

    for rank in range(4):
        assert facts(traces[recipe, "real"], rank) == facts(traces[recipe, "fake"], rank)
    assert run_checks(traces[recipe, "real"]).findings == []


def test_rowwise_keeps_a_high_precision_linear_under_tp():
    # tensorwise float8 TP refuses a block Linear left in bf16 (Float8ColwiseParallel); rowwise
    # uses the plain styles, which take it
    from tracer import config

    raw = {
        "model": {"converters": ["float8"]},
        "parallelism": {"tensor_parallel_degree": 2},
        "quantize": {"linear": {"float8": {"recipe_name": "rowwise", "filter_fqns": ["layers.1.feed_forward"]}}},
        "tracer": {"world_size": 4},
    }
    assert config.from_dict(raw).quantize.linear.float8.recipe_name == "rowwise"
