"""model.converters = ["float8"] (TorchTitan v0.2.2's Float8LinearConverter, torchao's tensorwise
recipe) with FSDP float8 all-gathers, precomputed scales and float8 tensor parallel, and async TP's
key: the exact collectives, derived by hand from torchao's code (tracer/workloads/float8.py)."""

import importlib.util
import os

import pytest
import tomllib
from conftest import TT, one_line_error, record_one_block, run_tracer, stream

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao not installed")

F8 = """
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
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
filter_fqns = ["output"]
[tracer]
world_size = 4
"""
COMM = ("all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor")


def facts(t, rank: int) -> list[tuple]:
    return [
        (e["step"], e["phase"], e["group"][0], e["op"], e["dtype"], e["in_bytes"], e["out_bytes"], e["reduce_op"])
        for e in stream(t, rank, COMM)
    ]


@pytest.fixture(scope="module")
def float8_traces(tmp_path_factory):
    from analyzer.loader import load

    d = tmp_path_factory.mktemp("f8")
    (d / "f8.toml").write_text(F8)
    out = {}
    for compute in ("real", "fake"):
        p = run_tracer("tracer", "record", str(d / "f8.toml"), "--compute", compute, "-o", str(d / f"{compute}.trace"))
        assert p.returncode == 0, p.stderr
        out[compute] = load(str(d / f"{compute}.trace"))
    return out


def test_float8_fsdp_and_tp_collectives_are_torchaos(float8_traces):
    # dim 64, 4 heads of 16 (no GQA), FFN int(2*256/3) = 170 -> 192; every block Linear has dims
    # divisible by 16, so wq, wk, wv, wo (64x64) and w1, w3 (192x64), w2 (64x192) are Float8Linear;
    # `output` is filtered: bf16. One rank holds 1/4 of each (tp 2 x fsdp 2).
    # FSDP all-gather of a block: one uint8 buffer: 4 x 1024 + 3 x 3072 float8 bytes + the two
    # norms (SequenceParallel: replicated over tp) 2 x 32 bf16 = 128 bytes: 13440 in, 26880 out.
    # Step 0 has no precomputed scale yet: before each block all-gather, fsdp_pre_all_gather casts
    # each of the 7 weights with reduce_amax=True: 7 all_reduce(max) of a float32 scalar on fsdp.
    # After each optimizer step, precompute_float8_dynamic_scale_for_fsdp: the 14 weights' amaxes
    # stacked (56 bytes), all-reduced (max) on each dim of their (fsdp, tp) mesh.
    # TP, per region: the input cast to float8 (its amax all-reduced over tp, float64 8 bytes: the
    # Partial amax resolves after amax_to_scale's float64 upcast), then the sequence-parallel
    # all-gather of (2, 8, 64) float8_e4m3fn = 1024 bytes; the rowwise wo / w2 cast their
    # Shard(-1) input (one more amax), their reduce-scatter stays bf16: (2, 16, 64) x 2 = 4096.
    # Backward per region: the incoming gradient cast to float8_e5m2 before the all-gather that
    # undoes the reduce-scatter (amax + 1024 bytes), one amax per colwise Linear's output gradient
    # (w1, w3 / wq, wk, wv: the first of them with the region's bf16 reduce-scatter), then the two
    # norms' bf16 gradient all-reduces and the block's float32 reduce-scatter (26752 x 4 bytes).
    t = float8_traces["real"]
    amax_fsdp = ("fsdp", "all_reduce", "float32", 4, 4, "max")
    amax_tp = ("tp", "all_reduce", "float64", 8, 8, "max")
    block_ag = ("fsdp", "all_gather_into_tensor", "uint8", 13440, 26880, None)
    fp8_ag = ("tp", "all_gather_into_tensor", "float8_e4m3fn", 1024, 2048, None)
    grad_ag = ("tp", "all_gather_into_tensor", "float8_e5m2", 1024, 2048, None)
    rs = ("tp", "reduce_scatter_tensor", "bfloat16", 4096, 2048, "sum")
    region = [amax_tp, fp8_ag, amax_tp, rs]
    norms = [("tp", "all_reduce", "bfloat16", 128, 128, "sum")]
    block_rs = ("fsdp", "reduce_scatter_tensor", "float32", 107008, 53504, "premul_sum")
    precompute = [("fsdp", "all_reduce", "float32", 56, 56, "max"), ("tp", "all_reduce", "float32", 56, 56, "max")]
    for rank in range(4):
        f = facts(t, rank)
        for step in (0, 1):
            fwd = [x[2:] for x in f if x[0] == step and x[1] == "forward" and x[2] != "batch"]
            pre = [amax_fsdp] * 7 if step == 0 else []
            assert fwd == [
                ("fsdp", "all_gather_into_tensor", "bfloat16", 4096, 8192, None),  # tok_embeddings
                ("tp", "reduce_scatter_tensor", "bfloat16", 4096, 2048, "sum"),  # its RowwiseParallel output
                *pre,
                block_ag,
                *region,
                *region,  # layers.0: attention, feed_forward
                *pre,
                block_ag,
                *region,
                *region,  # layers.1
                ("fsdp", "all_gather_into_tensor", "bfloat16", 4160, 8320, None),  # norm, output: bf16
                ("tp", "all_gather_into_tensor", "bfloat16", 2048, 4096, None),  # output's input: bf16
            ], (rank, step)
            bwd = [x[2:] for x in f if x[0] == step and x[1] == "backward"]
            blocks = [block_ag if x == block_ag else None for x in bwd]
            assert blocks.count(block_ag) == 2 and bwd.count(amax_fsdp) == (14 if step == 0 else 0)
            assert bwd.count(grad_ag) == 4 and bwd.count(fp8_ag) == 0  # AC none: nothing recomputed
            assert bwd.count(amax_tp) == 2 * (1 + 2 + 1 + 3)
            # 2 per block, 1 for the output layer, whose backward stays bf16 (+ its norm's all-reduce)
            assert bwd.count(rs) == 2 * 2 + 1 and bwd.count(norms[0]) == 2 * 2 + 1 and bwd.count(block_rs) == 2
            after = [x[2:] for x in f if x[0] == step + 1 and x[1] == "other" and x[7] == "max" and x[5] == 56]
            assert after == precompute, (rank, step)


def test_float8_fake_compute_records_what_real_compute_does(float8_traces):
    from analyzer.checks import run_checks

    for rank in range(4):
        real, fake = (facts(float8_traces[c], rank) for c in ("real", "fake"))
        assert real == fake
    for t in float8_traces.values():
        assert run_checks(t).findings == []


def test_registry_spelling_converts_but_keeps_plain_tp(tmp_path):
    # TorchTitan v0.2.2 registers the converter as "quantize.linear.float8", but parallelize_llama
    # picks the float8 TP styles only for `"float8" in converters`: with this spelling the block
    # weights still all-gather in float8 over fsdp (13440 bytes, as above), while the tp
    # sequence-parallel all-gathers stay bf16: (2, 8, 64) x 2 = 2048 bytes, no amax before them.
    from analyzer.loader import load

    (tmp_path / "q.toml").write_text(F8.replace('converters = ["float8"]', 'converters = ["quantize.linear.float8"]'))
    p = run_tracer("tracer", "record", str(tmp_path / "q.toml"), "-o", str(tmp_path / "q.trace"))
    assert p.returncode == 0, p.stderr
    f = [x for x in facts(load(str(tmp_path / "q.trace")), 0) if x[1] == "forward" and x[0] == 1]
    assert [x[4:7] for x in f if x[2] == "fsdp" and x[4] == "uint8"] == [("uint8", 13440, 26880)] * 2
    tp_ag = [x[4:7] for x in f if x[2] == "tp" and x[3] == "all_gather_into_tensor"]
    assert tp_ag == [("bfloat16", 2048, 4096)] * 5  # 2 regions x 2 blocks + the output layer's input


def test_405b_preset_records_with_float8_and_async_tp(tmp_path):
    # The 405B preset unchanged but for one block, at dp 2 x tp 8, rank 0 (fake compute).
    # Block Linears: wq, wo 16384x16384, wk, wv 1024x16384, w1, w3 53248x16384, w2 16384x53248:
    # 3,187,671,040 float8 elements; / tp 8 / fsdp 2 = 199,229,440 bytes per rank, + the two norms
    # (16384 each, replicated over tp) / 2 in bf16 = 32,768 bytes: 199,262,208 in, x 2 out.
    # `output` (filter_fqns) stays bf16; after each step one amax all-reduce of 7 weights (28 bytes)
    # on fsdp and on tp. Async TP: accepted with compile, the tp collectives recorded as they are.
    from analyzer.loader import load

    text = open(os.path.join(TT, "llama3_405b.toml")).read()
    assert 'converters = ["float8"]' in text and "enable_async_tensor_parallel = true" in text
    p, out = record_one_block(tmp_path, "llama3_405b.toml", "405B")
    assert "note: async TP: TorchTitan v0.2.2 sets inductor's _micro_pipeline_tp" in p.stderr
    f = facts(load(str(out)), 0)
    block = [x for x in f if x[3] == "all_gather_into_tensor" and x[2] == "fsdp" and x[4] == "uint8"]
    assert [x[5:7] for x in block] == [(199_262_208, 398_524_416)] * 4  # forward + backward, 2 steps
    assert [x[4] for x in f if x[3] == "all_gather_into_tensor" and x[2] == "fsdp"].count("bfloat16") == 6
    pre = [x for x in f if x[1] == "other" and x[7] == "max" and x[2] in ("fsdp", "tp") and x[5] == 28]
    assert [(x[0], x[2]) for x in pre] == [(1, "fsdp"), (1, "tp"), (2, "fsdp"), (2, "tp")]
    tp_ag = {x[4] for x in f if x[3] == "all_gather_into_tensor" and x[2] == "tp"}
    assert tp_ag == {"float8_e4m3fn", "float8_e5m2", "bfloat16"}  # bf16: the output layer's input


@pytest.mark.parametrize(
    "extra,msg",
    [
        ('[model]\nconverters = ["mx"]', "model.converters: 'mx' is not modelled by the built-in workload"),
        (
            '[model]\nconverters = ["float8"]\n[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
            "enable_fsdp_float8_all_gather = true",
            "enable_fsdp_float8_all_gather cannot be set with recipe_name = 'rowwise' (TorchTitan asserts",
        ),
        (
            '[model]\nconverters = ["float8"]\n[quantize.linear.float8]\nrecipe_name = "rowwize"',
            "recipe_name must be one of tensorwise, rowwise, rowwise_with_gw_hp (torchao's Float8LinearRecipeName), "
            "got 'rowwize' (did you mean 'rowwise'?)",
        ),
        (
            "[parallelism]\nenable_async_tensor_parallel = true",
            "parallelism.enable_async_tensor_parallel needs compile.enable = true",
        ),
        (
            '[model]\nconverters = ["float8"]\ndim = 40\nn_heads = 4\n[parallelism]\ntensor_parallel_degree = 2',
            "float8 tensor parallel needs every block Linear in float8, but layers.0.attention.wq [40, 40]",
        ),
        (
            '[model]\nconverters = ["float8"]\n[parallelism]\ntensor_parallel_degree = 2\n'
            '[quantize.linear.float8]\nfilter_fqns = ["layers.1.feed_forward"]',
            "but layers.1.feed_forward.w1 [192, 64] stays high precision",
        ),
        ("[quantize.linear.float8]\nenable_fsdp_float8_all_gather = 1", "expected bool, got int"),
        ("[quantize.linear]\nfloat9 = {}", "unknown key quantize.linear.float9 (did you mean 'float8'?)"),
    ],
)
def test_float8_and_async_tp_keys_refused_in_one_line(extra, msg):
    from tracer import config

    raw: dict = {"tracer": {"world_size": 4}}
    for section, values in tomllib.loads(extra).items():
        raw.setdefault(section, {}).update(values)
    with pytest.raises(ValueError) as e:
        config.from_dict(raw)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_float8_in_local_mode_is_one_line(tmp_path):
    (tmp_path / "f8.toml").write_text(F8)
    p = run_tracer("tracer", "record", str(tmp_path / "f8.toml"), "--mode", "local", cwd=tmp_path)
    assert p.returncode == 2
    assert "float8 (torchao's Float8 tensor subclasses) cannot run under LocalTensorMode" in one_line_error(p)


def test_async_tp_with_compile_is_accepted():
    from tracer import config

    cfg = config.from_dict(
        {
            "parallelism": {"enable_async_tensor_parallel": True, "tensor_parallel_degree": 2},
            "compile": {"enable": True, "components": ["model", "loss"], "backend": "inductor"},
            "tracer": {"world_size": 4},
        }
    )
    assert cfg.parallelism.enable_async_tensor_parallel and cfg.compile.enable


def test_float8_without_torchao_says_how_to_enable_it(tmp_path, monkeypatch):
    p = tmp_path / "f8.toml"
    p.write_text(F8)
    from tracer import config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs torchao .*pip install -c constraints-cpu.txt 'commtrace\[float8\]'"):
        config.load(str(p))
