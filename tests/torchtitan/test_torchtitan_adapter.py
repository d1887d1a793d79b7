"""tracer record --torchtitan / [job] torchtitan: the installed TorchTitan trainer on every
simulated rank (tracer/adapters/torchtitan). Bad input needs no TorchTitan; the recordings
run TorchTitan 0.3 itself and are skipped, with the reason, only when it is not installed."""

from __future__ import annotations

import importlib.util

import polars as pl
import pytest
from typer.testing import CliRunner

from tracer import cli
from tracer.adapters.torchtitan import job as tt_job
from tracer.adapters.torchtitan import version

HAVE_TORCHTITAN = importlib.util.find_spec("torchtitan") is not None
needs_torchtitan = pytest.mark.skipif(
    not HAVE_TORCHTITAN,
    reason="TorchTitan is not installed (pip install -c constraints-cpu.txt '.[torchtitan]')",
)
SMALL = [
    "--training.steps",
    "2",
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "2",
]
"""2 steps of the debug model on short sequences: the comm pattern does not depend on the length."""


def _record(args: list[str]):
    return CliRunner().invoke(cli.app, ["record", *args])


def _one_line_exit_2(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert all(w in lines[0] for w in words), lines[0]


# ---- the job: TOML sections -> TorchTitan's own overrides ---------------------------------
def test_toml_sections_become_torchtitan_cli_overrides():
    raw = {
        "job": {
            "torchtitan": {"module": "llama3", "config": "llama3_debugmodel"},
            "args": ["--debug.seed", "3"],
        },
        "training": {"steps": 2, "seq_len": 64, "disable_cuda_graphs": True},
        "checkpoint": {"enable": False},
        "parallelism": {"data_parallel_shard_degree": 4, "tensor_parallel_degree": 2},
        "compile": {"components": ["model", "loss"]},
        "tracer": {"world_size": 8},
    }
    job = tt_job.from_toml(raw)
    assert (job.module, job.config) == ("llama3", "llama3_debugmodel")
    assert job.overrides == [
        "--training.steps",
        "2",
        "--training.seq_len",
        "64",
        "--training.disable_cuda_graphs",
        "--checkpoint.no-enable",
        "--parallelism.data_parallel_shard_degree",
        "4",
        "--parallelism.tensor_parallel_degree",
        "2",
        "--compile.components",
        "model,loss",
        "--debug.seed",
        "3",
    ]
    # the adapter's CPU defaults come first, so the user's own values win
    assert job.args[:4] == ["--module", "llama3", "--config", "llama3_debugmodel"]
    assert job.args[4 : 4 + len(tt_job.CPU_DEFAULTS)] == tt_job.CPU_DEFAULTS
    # TorchTitan's default spmd_backend stays, but for a torch whose FSDP cannot run it
    fallback = tt_job.SPMD_FALLBACK if tt_job.spmd_types_fsdp_gap() else []
    assert job.defaults() == tt_job.CPU_DEFAULTS + fallback
    assert job.comm_mode() == "fake_backend"
    assert tt_job.from_spec("llama3:x", ["--comm.mode", "local_tensor"]).comm_mode() == "local_tensor"


# ---- bad input: one line, exit 2 -----------------------------------------------------------
def test_torchtitan_spec_must_name_module_and_config():
    _one_line_exit_2(_record(["--torchtitan", "llama3", "-n", "8"]), "MODULE:CONFIG")


def test_torchtitan_not_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(version, "installed", lambda: None)
    _one_line_exit_2(
        _record(["--torchtitan", "llama3:llama3_debugmodel", "-n", "8"]),
        "not installed",
        "commtrace[torchtitan]",
    )


def test_unsupported_torchtitan_version_is_one_line(monkeypatch):
    monkeypatch.setattr(version, "installed", lambda: "0.2.2")
    _one_line_exit_2(
        _record(["--torchtitan", "llama3:llama3_debugmodel", "-n", "8"]),
        "0.2.2 is not supported",
        "0.3.x",
    )


def test_toml_with_a_bad_torchtitan_table_is_one_line(tmp_path):
    cfg = tmp_path / "train.toml"
    cfg.write_text('[job]\ntorchtitan = {module = "llama3"}\n[tracer]\nworld_size = 8\n')
    _one_line_exit_2(_record([str(cfg)]), "job.torchtitan")


@needs_torchtitan
@pytest.mark.torchtitan
@pytest.mark.parametrize(
    "args, words",
    [
        (
            ["--torchtitan", "llama9:llama3_debugmodel"],
            ["unknown TorchTitan module 'llama9'"],
        ),
        (
            ["--torchtitan", "llama3:llama3_debugmodle"],
            [
                "unknown TorchTitan config 'llama3_debugmodle'",
                "did you mean 'llama3_debugmodel'",
            ],
        ),
        (
            ["--torchtitan", "llama3:llama3_debugmodel", "--", "--training.stepz", "2"],
            ["unknown TorchTitan key --training.stepz", "--training.steps"],
        ),
        (
            [
                "--torchtitan",
                "llama3:llama3_debugmodel",
                "--",
                "--parallelism.tensor_parallel_degree",
                "3",
            ],
            ["parallelism degrees", "world size 8"],
        ),
    ],
)
def test_bad_torchtitan_job_is_one_line(args, words):
    split = args.index("--") if "--" in args else len(args)
    _one_line_exit_2(_record([*args[:split], "-n", "8", *args[split:]]), *words)


# ---- recordings: TorchTitan 0.3's llama3 debug model --------------------------------------
@pytest.fixture(scope="module")
def fsdp_tp(tmp_path_factory):
    """llama3 debug model, FSDP 4 x TP 2, 8 ranks, fake mode, 2 steps, recorded from a TOML
    (its TorchTitan sections become TorchTitan's own overrides)."""
    work = tmp_path_factory.mktemp("tt")
    cfg = work / "train.toml"
    cfg.write_text(
        '[job]\ntorchtitan = {module = "llama3", config = "llama3_debugmodel"}\n'
        "[training]\nsteps = 2\nseq_len = 64\nlocal_batch_size = 2\n"
        "[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
        "[tracer]\nworld_size = 8\n"
    )
    out = str(work / "fsdp_tp.trace")
    result = _record([str(cfg), "-o", out])
    assert result.exit_code == 0, result.output
    from analyzer.loader import load  # the package-level load() is shadowed once analyzer.loader is imported

    return load(out)


def _rank0(t, dim: str, step: int) -> pl.DataFrame:
    gids = t.groups.filter(pl.col("label") == dim)["gid"].to_list()
    return t.events.filter((pl.col("rank") == 0) & pl.col("group").is_in(gids) & (pl.col("step") == step))


@needs_torchtitan
@pytest.mark.torchtitan
@pytest.mark.slow
def test_llama3_fsdp_tp_records_with_zero_findings(fsdp_tp):
    from analyzer.checks import run_checks

    assert sorted(fsdp_tp.events["rank"].unique().to_list()) == list(range(8))
    assert run_checks(fsdp_tp).findings == []


@needs_torchtitan
@pytest.mark.torchtitan
@pytest.mark.slow
def test_llama3_fsdp_units_per_step(fsdp_tp):
    """TorchTitan's apply_fsdp_to_decoder wraps tok_embeddings, each of the 6 blocks, and
    [norm, lm_head] together: 8 units, each all-gathered once in forward (module order) and
    reduce-scattered once in backward (reverse order; [norm, lm_head] twice: the chunked loss
    runs lm_head outside the model's forward, a second autograd pass through that unit)."""
    units = ["tok_embeddings", *[f"layers.{i}" for i in range(6)], "norm, lm_head"]
    for step in (0, 1):
        ev = _rank0(fsdp_tp, "fsdp", step)
        fwd = ev.filter((pl.col("op") == "all_gather_into_tensor") & (pl.col("phase") == "forward"))
        assert fwd["module"].to_list() == units
        rs = ev.filter(pl.col("op") == "reduce_scatter_tensor")["module"].to_list()
        assert rs == ["norm, lm_head", "norm, lm_head", *reversed(units[:-1])]


@needs_torchtitan
@pytest.mark.torchtitan
@pytest.mark.slow
def test_llama3_tp_collectives_per_layer(fsdp_tp):
    """TP 2 with sequence parallel and selective AC, per block per step: forward all-gathers the
    sequence-sharded input of attention and of the feed-forward (2) and reduce-scatters wo's and
    w2's outputs back to sequence shards (2); backward recomputes those 2 all-gathers, all-gathers
    the gradients of the 2 reduce-scatters (4), reduce-scatters the gradients of the 2 input
    all-gathers (2), and all-reduces the two sequence-parallel norm weights' gradients (2)."""
    ev = _rank0(fsdp_tp, "tp", 0)
    layer = pl.col("module").cast(pl.Utf8).str.extract(r"^layers\.(\d+)")
    per = ev.with_columns(layer=layer).filter(pl.col("layer").is_not_null()).group_by("layer", "op", "phase").len()
    expected = {
        ("all_gather_into_tensor", "forward"): 2,
        ("reduce_scatter_tensor", "forward"): 2,
        ("all_gather_into_tensor", "backward"): 4,
        ("reduce_scatter_tensor", "backward"): 2,
        ("all_reduce", "backward"): 2,
    }
    for i in range(6):
        rows = per.filter(pl.col("layer") == str(i))
        assert {(r["op"], r["phase"]): r["len"] for r in rows.iter_rows(named=True)} == expected
    # outside the blocks: the embedding's output and the final norm's input (1 each way)
    assert ev.filter((pl.col("op") == "all_gather_into_tensor") & (pl.col("phase") == "forward")).height == 13
    assert ev.filter((pl.col("op") == "reduce_scatter_tensor") & (pl.col("phase") == "forward")).height == 13
