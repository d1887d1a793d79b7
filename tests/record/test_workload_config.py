"""`tracer record CONFIG.toml`: TorchTitan keys, CLI overrides, and one-line errors (exit 2)."""

import os

import pytest
from conftest import REPO, one_line_error, program, run_tracer, stream

from analyzer.loader import load

EXAMPLES = os.path.join(REPO, "examples")


BASE = """
[model]
dim = 64
n_layers = 2
n_heads = 4
vocab_size = 128
[parallelism]
{par}
[tracer]
world_size = {world}
"""


@pytest.mark.parametrize(
    "par,world,msg",
    [
        (
            "tensor_paralel_degree = 2",
            4,
            "unknown key parallelism.tensor_paralel_degree (did you mean 'tensor_parallel_degree'?)",
        ),
        ("tensor_parallel_degree = 2\ndata_parallel_shard_degree = 4", 4, "parallelism: degrees multiply to 8"),
        ("data_parallel_shard_degree = 3", 4, "tracer.world_size is 4"),
        (
            'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\nmicrobatches = 4',
            4,
            "Interleaved1F1B needs 8 stages (4 ranks x 2): 8 pipeline stages cannot split 2 layers (+ 1 for "
            "tok_embeddings, + 1 for norm and output): more stages than layers",
        ),
        (
            "pipeline_parallel_degree = 2\npipeline_parallel_first_stage_less_layers = 5",
            2,
            "pipeline_parallel_first/last_stage_less_layers (5/1) exceed the 4 layers per stage",
        ),
        (
            "enable_async_tensor_parallel = true",
            4,
            'parallelism.enable_async_tensor_parallel needs compile.enable = true with "model" in compile.components',
        ),
        ('pipeline_parallel_split_points = ["layers.1"]', 4, "parallelism.pipeline_parallel_split_points"),
        (
            '[activation_checkpoint]\nmode = "ful"',
            4,
            "activation_checkpoint.mode must be one of none, selective, full, got 'ful' (did you mean 'full'?)",
        ),
        (
            '[activation_checkpoint]\nselective_ac_option = "ops"',
            4,
            'activation_checkpoint.selective_ac_option must be "op" or a positive layer frequency',
        ),
        (
            '[training]\nmixed_precision_param = "float16"',
            4,
            'training.mixed_precision_param must be "bfloat16" or "float32", got \'float16\'',
        ),
        ("[training]\nmax_norm = 0", 4, "training.max_norm must be positive"),
        ("[validation]\nenable = true", 4, "validation.enable = True changes the comm pattern"),
        (
            'pipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZeroBubble"',
            2,
            "parallelism.pipeline_parallel_schedule must be one of GPipe, 1F1B, Interleaved1F1B",
        ),
        ('tensor_parallel_degree = "2"', 4, "parallelism.tensor_parallel_degree: expected int, got str"),
        ("enable_sequence_parallel = 1", 4, "parallelism.enable_sequence_parallel: expected bool"),
        ("expert_parallel_degree = 2", 4, "needs an MoE model: set model.n_experts"),
        ("context_parallel_degree = 2", 4, "context parallel is not modelled"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, par, world, msg):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(BASE.format(par=par, world=world))
    p = run_tracer("tracer", "record", str(cfg), cwd=tmp_path)
    assert p.returncode == 2
    line = one_line_error(p)
    assert msg in line and line.startswith(f"error: {cfg}: ")
    assert not (tmp_path / "bad.trace").exists()


def test_keys_that_would_change_the_pattern_are_refused_unless_at_their_default():
    from tracer import config

    with pytest.raises(ValueError, match=r"^model.converters: 'mx' is not modelled by the built-in workload"):
        config.from_dict({"model": {"converters": ["mx"]}, "tracer": {"world_size": 1}})
    with pytest.raises(ValueError, match=r"^checkpoint.enable = True changes the comm pattern"):
        config.from_dict({"checkpoint": {"enable": True, "folder": "ckpt"}})
    cfg = config.from_dict(
        {
            "model": {"converters": []},
            "checkpoint": {"enable": False, "interval": 5},
            "parallelism": {"pipeline_parallel_split_points": [], "expert_tensor_parallel_degree": 1},
            "tracer": {"world_size": 1},
        }
    )
    assert cfg.world_size == 1


def test_unknown_section_and_bad_toml(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[paralelism]\ntensor_parallel_degree = 2\n")
    p = run_tracer("tracer", "record", str(cfg), cwd=tmp_path)
    assert p.returncode == 2 and "unknown section [paralelism] (did you mean 'parallelism'?)" in one_line_error(p)
    cfg.write_text("[model\n")
    p = run_tracer("tracer", "record", str(cfg), cwd=tmp_path)
    assert p.returncode == 2 and "not valid TOML" in one_line_error(p)
    p = run_tracer("tracer", "record", str(tmp_path / "none.toml"), cwd=tmp_path)
    assert p.returncode == 2 and "config not found" in one_line_error(p)


def test_torchtitan_sections_and_keys_that_cannot_change_a_pattern_are_accepted():
    from tracer import config

    cfg = config.from_dict(
        {
            "job": {"dump_folder": "./outputs", "description": "x"},
            "metrics": {"log_freq": 10},
            "checkpoint": {"enable_checkpoint": False},
            "training": {"dataset": "c4_test", "max_norm": 1.0, "steps": 3},
            "parallelism": {
                "data_parallel_shard_degree": -1,
                "tensor_parallel_degree": 2,
                "disable_loss_parallel": True,
            },
            "comm": {"trace_buf_size": 20000, "mode": "local_tensor"},
            "tracer": {"world_size": 8},
        }
    )
    assert cfg.parallelism.data_parallel_shard_degree == 4 and cfg.training.steps == 3
    assert cfg.comm.mode == "local_tensor"


def test_world_size_is_the_product_of_degrees_and_microbatch_knobs():
    from tracer import config

    cfg = config.from_dict(
        {
            "parallelism": {
                "data_parallel_replicate_degree": 2,
                "data_parallel_shard_degree": 2,
                "tensor_parallel_degree": 2,
            }
        }
    )
    assert cfg.world_size == 8
    pp = {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "GPipe", "data_parallel_shard_degree": 1}
    cfg = config.from_dict(
        {"parallelism": dict(pp, pipeline_parallel_microbatch_size=2), "training": {"local_batch_size": 8}}
    )
    assert cfg.n_microbatches == 4 and cfg.world_size == 2
    cfg = config.from_dict({"parallelism": dict(pp, microbatches=8), "training": {"local_batch_size": 8}})
    assert cfg.n_microbatches == 8
    with pytest.raises(ValueError, match="microbatches: 3 microbatches do not split"):
        config.from_dict({"parallelism": dict(pp, microbatches=3), "training": {"local_batch_size": 8}})


def test_cli_options_override_the_toml(tmp_path):
    # fsdp.toml says world_size = 4 and data_parallel_shard_degree = -1: -n 2 makes it FSDP over 2
    p = run_tracer(
        "tracer",
        "record",
        os.path.join(EXAMPLES, "fsdp.toml"),
        "-n",
        "2",
        "--ranks",
        "1",
        "-o",
        "o.trace",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    t = load(tmp_path / "o.trace")
    assert t.world_size == 2 and t.ranks == [1]
    assert t.header["config"]["parallelism"]["data_parallel_shard_degree"] == 2
    assert t.header["config"]["config_file"].endswith("fsdp.toml")
    ag = [e for e in stream(t, 1) if e["op"] == "all_gather_into_tensor"]
    assert ag[0]["in_shapes"] == [[4096]] and ag[0]["out_shapes"] == [[8192]]  # tok_embeddings / 2
    assert ag[0]["frame"].startswith(os.path.join("..", "..")) or "tracer/workloads/" in ag[0]["frame"]


def test_job_script_from_toml(tmp_path):
    # [job] script: record the user's own program, with the world size from [tracer]
    cfg = tmp_path / "job.toml"
    cfg.write_text(
        f'[job]\nscript = "{program("fsdp")}"\nargs = ["--no-reshard"]\n'
        '[comm]\nmode = "local_tensor"\n[tracer]\nworld_size = 2\noutput = "mine.trace"\n'
    )
    p = run_tracer("tracer", "record", str(cfg), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    t = load(tmp_path / "mine.trace")
    assert t.header["mode"] == "local" and t.world_size == 2
    ops = [e["op"] for e in stream(t, 0) if e["op"].startswith(("all_gather", "reduce_scatter"))]
    assert len(ops) == 12  # fsdp.py --no-reshard: 3 all-gathers + 3 reduce-scatters per step


def test_script_with_args_after_double_dash_still_works(tmp_path):
    p = run_tracer(
        "tracer", "record", "--script", program("fsdp"), "-n", "2", "-o", "s.trace", "--", "--no-reshard", cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    assert load(tmp_path / "s.trace").header["config"]["args"] == ["--no-reshard"]
