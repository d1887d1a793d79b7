"""TorchTitan v0.2.2's shipped train configs (tests/torchtitan_v0.2.2/, copied unchanged from the
v0.2.2 tag), read as they are: dry-run length, world size, flavors."""

import os

import pytest
from conftest import REPO
from test_workload_config import one_line_error, run_tracer

TT = os.path.join(REPO, "tests", "torchtitan_v0.2.2")


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
    # the 405B preset turns on float8 (fp8 all-gathers), which the built-in workload refuses in one line
    with pytest.raises(ValueError, match=r"model.converters = \['float8'\] changes the comm pattern"):
        config.load(os.path.join(TT, "llama3_405b.toml"), world_size=128)
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


def test_other_models_without_torchtitan_say_how_to_enable_it(monkeypatch, capsys):
    import typer

    from tracer import cli_torchtitan
    from tracer.adapters.torchtitan import version

    monkeypatch.setattr(version, "installed", lambda: None)
    for name in ("deepseek_v3_debug_model", "qwen3_moe_debug", "llama4_debug_model"):
        with pytest.raises(typer.Exit) as e:
            cli_torchtitan.record_toml(os.path.join(TT, name + ".toml"), None, None, None, None, None, {}, [])
        assert e.value.exit_code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "pip install 'commtrace[torchtitan]'" in err[0], err
