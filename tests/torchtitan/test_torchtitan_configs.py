"""TorchTitan v0.2.2's shipped train configs (tests/torchtitan/torchtitan_v0.2.2/, copied unchanged from the
v0.2.2 tag), read as they are: dry-run length, world size, flavors."""

import importlib.util
import os

import pytest
from conftest import TT, one_line_error, record_one_block, run_tracer


def test_a_minus_one_degree_without_a_world_size_asks_for_n(tmp_path):
    p = run_tracer("tracer", "record", os.path.join(TT, "llama3_8b.toml"), "-o", str(tmp_path / "x.trace"))
    assert p.returncode == 2
    assert "give -n N (or [tracer] world_size)" in one_line_error(p)
    assert not (tmp_path / "x.trace").exists()


def test_dry_run_length_defaults_to_two_steps_and_is_overridable():
    from tracer import config

    cfg = config.load(os.path.join(TT, "llama3_8b.toml"), world_size=8)
    assert cfg.training.steps == 1000 and cfg.steps == 2
    assert "recording 2 of training.steps=1000 steps" in cfg.steps_why()
    cfg = config.load(os.path.join(TT, "llama3_8b.toml"), world_size=8, steps=3)
    assert cfg.steps == 3 and "asked for" in cfg.steps_why()
    one = config.from_dict({"training": {"steps": 1}, "tracer": {"world_size": 2}})
    assert one.steps == 1 and one.steps_why() == "recording all 1 steps of training.steps=1"
    with pytest.raises(ValueError, match="tracer.steps must be at least 1"):
        config.from_dict({"tracer": {"world_size": 2, "steps": -1}})


def test_flavors_are_torchtitans_llama3_args():
    from tracer import config

    m = config.load(os.path.join(TT, "llama3_70b.toml"), world_size=64).model
    assert (m.dim, m.n_layers, m.n_heads, m.kv_heads, m.vocab_size, m.rope_theta) == (8192, 80, 64, 8, 128256, 5e5)
    # FFN: int(2 * 4 * 8192 / 3) = 21845, x 1.3 = 28398, rounded up to a multiple of 4096
    assert m.hidden_dim == 28672
    per_block = 8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert per_block == 855_654_400
    # the 405B preset turns on float8 (fp8 all-gathers, tests/record/test_workload_float8.py) and async TP
    if importlib.util.find_spec("torchao") is not None:
        cfg = config.load(os.path.join(TT, "llama3_405b.toml"), world_size=128)
        f8 = cfg.quantize.linear.float8
        assert cfg.model.converters == ["float8"] and f8.filter_fqns == ["output"]
        assert f8.enable_fsdp_float8_all_gather and f8.precompute_float8_dynamic_scale_for_fsdp
        assert cfg.parallelism.enable_async_tensor_parallel and cfg.compile.enable
        assert cfg.parallelism.data_parallel_shard_degree == 16
    m = config.from_dict(
        {"model": {"flavor": "405B"}, "parallelism": {"tensor_parallel_degree": 8}, "tracer": {"world_size": 128}}
    ).model
    assert (m.dim, m.n_layers, m.n_heads, m.kv_heads, m.hidden_dim) == (16384, 126, 128, 8, 53248)
    m = config.load(os.path.join(TT, "llama3_8b.toml"), world_size=8).model
    assert (m.dim, m.n_layers, m.n_heads, m.kv_heads, m.hidden_dim, m.vocab_size) == (4096, 32, 32, 8, 14336, 128256)
    # keys next to the flavor override it; an unknown flavor is one line
    cfg = config.from_dict({"model": {"flavor": "8B", "n_layers": 2}, "tracer": {"world_size": 1}})
    assert cfg.model.n_layers == 2 and cfg.model.dim == 4096
    with pytest.raises(ValueError, match="model.flavor: '7B' is not a llama3 flavor .*did you mean '70B'"):
        config.from_dict({"model": {"flavor": "7B"}})


def test_llama3_debug_model_toml_records_unchanged_with_its_flavor(tmp_path):
    # debugmodel: dim 256, 6 blocks, 16 heads (no GQA), vocab 2048, FFN int(2*1024/3)=682 -> 768.
    # Block: 4 x 256 x 256 attention + 3 x 256 x 768 FFN + 2 norms = 852,480 parameters; FSDP over
    # 4 ranks gathers 213,120 per rank into 852,480. tok_embeddings 2048 x 256; [norm, output]
    # 256 + 2048 x 256. 2 steps recorded of the file's 10.
    from conftest import stream

    from analyzer.loader import load

    out = tmp_path / "debug.trace"
    p = run_tracer("tracer", "record", os.path.join(TT, "llama3_debug_model.toml"), "-n", "4", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "recording 2 of training.steps=10 steps" in p.stderr
    t = load(str(out))
    block, emb, last = 852_480, 2048 * 256, 256 + 2048 * 256
    fwd = [emb] + [block] * 6 + [last]
    for rank in range(4):
        ags = [e for e in stream(t, rank) if e["op"] == "all_gather_into_tensor"]
        forward = [(e["in_shapes"], e["out_shapes"]) for e in ags if e["phase"] == "forward" and e["step"] == 1]
        assert forward == [([[n // 4]], [[n]]) for n in fwd]
        assert {e["step"] for e in ags} == {0, 1}
        assert {e["module"] for e in ags if e["out_shapes"] == [[block]]} == {f"layers.{i}" for i in range(6)}


def test_other_models_without_torchtitan_say_how_to_enable_it(monkeypatch):
    from typer.testing import CliRunner

    from tracer import cli
    from tracer.adapters.torchtitan import version

    monkeypatch.setattr(version, "installed", lambda: None)
    for name in ("deepseek_v3_debug_model", "qwen3_moe_debug", "llama4_debug_model"):
        res = CliRunner().invoke(cli.app, ["record", os.path.join(TT, name + ".toml")])
        assert res.exit_code == 2
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and "pip install 'commtrace[torchtitan]'" in err[0], err


def test_llama3_70b_block_all_gathers_carry_the_blocks_parameters_in_bf16(tmp_path):
    # The 70B preset unchanged but for one block (n_layers next to the flavor), at dp 2 x tp 8,
    # rank 0 only (fake compute: 70B shapes cost no memory). Derived from the flavor's dims:
    # block = wq 8192x8192 + wk, wv 8192x1024 + wo 8192x8192 + w1, w2, w3 8192x28672 + 2 norms
    # = 855,654,400 parameters; TP 8 splits the linears (Colwise / Rowwise), the norms stay whole
    # (SequenceParallel), so one TP rank's block is 855,638,016 / 8 + 2 x 8192 = 106,971,136,
    # which FSDP over dp 2 gathers from 53,485,568 per rank. tok_embeddings: vocab 128256 / 8 =
    # 16032 rows x 8192; [norm, output]: 8192 + 16032 x 8192. Every FSDP all-gather in bf16
    # (mixed_precision_param), its gradient reduce-scattered in float32 (mixed_precision_reduce).
    from conftest import stream

    from analyzer.loader import load

    p, out = record_one_block(tmp_path, "llama3_70b.toml", "70B")
    assert "peak memory per recording process: max" in p.stderr
    linears = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    assert linears + 2 * 8192 == 855_654_400
    block, emb, last = linears // 8 + 2 * 8192, 16032 * 8192, 8192 + 16032 * 8192
    assert block == 106_971_136
    events = stream(load(str(out)), 0)
    fsdp = [e for e in events if e["group"] and e["group"][0] == "fsdp"]
    ags = [e for e in fsdp if e["op"] == "all_gather_into_tensor"]
    per_step = [
        ("forward", "tok_embeddings", emb),
        ("forward", "layers.0", block),
        ("forward", "norm, output", last),
        ("backward", "layers.0", block),  # full activation checkpointing: resharded after forward
        ("backward", "tok_embeddings", emb),
    ]
    got = [(e["phase"], e["module"], e["out_shapes"][0][0]) for e in ags]
    assert got == per_step * 2
    for e in ags:
        n = e["out_shapes"][0][0]
        assert e["in_shapes"] == [[n // 2]] and e["out_shapes"] == [[n]], e
        assert e["dtype"] == "bfloat16" and e["out_bytes"] == 2 * n and e["in_bytes"] == n, e
    rs = [(e["module"], e["in_shapes"], e["out_shapes"], e["dtype"]) for e in fsdp if e["op"].startswith("reduce_sc")]
    units = [("norm, output", last), ("layers.0", block), ("tok_embeddings", emb)]
    assert rs == [(m, [[n]], [[n // 2]], "float32") for m, n in units] * 2


HAVE_TORCHTITAN = importlib.util.find_spec("torchtitan") is not None


@pytest.mark.skipif(not HAVE_TORCHTITAN, reason="TorchTitan is not installed")
def test_qwen3_config_goes_through_the_torchtitan_adapter():
    # v0.2.2's qwen3_moe_debug.toml names flavor "debugmodel_moe"; TorchTitan 0.3.0 registers no
    # qwen3_debugmodel_moe but qwen3_moe_debug, whose model_spec is that flavor. The job reaches
    # the recorder as the adapter's entrypoint with that config and the file's degrees, after
    # TorchTitan's own parser accepted it (plan); the adapter's recordings are tested in
    # test_torchtitan_adapter.py, here only the route (the request is built, not recorded).
    from tracer.adapters.torchtitan.plan import ENTRYPOINT
    from tracer.record.build import build
    from tracer.record.options import RecordOptions

    path = os.path.join(TT, "qwen3_moe_debug.toml")
    notes: list[str] = []
    request = build(RecordOptions(config=path, world_size=2, out="/nonexistent/q.trace"), notes.append)
    assert "model 'qwen3' records through the installed TorchTitan (qwen3:qwen3_moe_debug), 2 steps" in notes
    args = request.program.args
    assert request.program.entrypoint == ENTRYPOINT and request.world_size == 2
    assert args[:4] == ["--module", "qwen3", "--config", "qwen3_moe_debug"]
    assert "--parallelism.data_parallel_shard_degree" in args and "--training.steps" in args
    assert args[args.index("--training.steps") + 1] == "2"


@pytest.mark.skipif(not HAVE_TORCHTITAN, reason="TorchTitan is not installed")
def test_llama4_config_is_one_line_where_torchtitan_has_no_llama4():
    # TorchTitan 0.3.0 ships no torchtitan/models/llama4 (v0.2.2 did)
    from typer.testing import CliRunner

    from tracer import cli

    res = CliRunner().invoke(cli.app, ["record", os.path.join(TT, "llama4_debug_model.toml"), "-n", "8"])
    assert res.exit_code == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "model.name 'llama4': TorchTitan" in err[0] and "has no such model" in err[0], err
