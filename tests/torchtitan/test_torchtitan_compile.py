"""TorchTitan's `--compile.enable` recorded (#28 item 1), against its eager twin: the same job without
compile. Debug model, 2 ranks (rank 0 recorded), 2 steps, seq 64. Before, every compiled run
stopped at the first forward (`Unsupported: Tensor with grad_fn()` in commtrace's own hook).
Each compiled rank spends minutes in inductor on a CPU (5-10 on a cold cache): these are the slow
end of the suite. COMMTRACE_COMPILE_BACKEND picks another backend (TorchTitan's --compile.backend)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import polars as pl
import pytest

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
]
BIN = os.path.dirname(sys.executable)
SMALL = ["--training.steps", "2", "--training.seq_len", "64", "--training.local_batch_size", "2"]
COMPILE = ["--compile.enable", "--compile.backend", os.environ.get("COMMTRACE_COMPILE_BACKEND", "inductor")]


def _record(tmp, name: str, *overrides: str) -> str:
    out = str(tmp / f"{name}.trace")
    p = subprocess.run(
        [os.path.join(BIN, "tracer"), "record", "--torchtitan", "llama3:llama3_debugmodel", "-n", "2", "--ranks", "0",
         "-o", out, "--", *overrides, *SMALL],
        capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out


TP = ["--parallelism.tensor_parallel_degree", "2"]


@pytest.fixture(scope="module")
def compiled2d(tmp_path_factory) -> str:
    """TP 2 compiled, recorded once for the 2d and async TP tests (minutes of inductor each)."""
    return _record(tmp_path_factory.mktemp("compiled2d"), "compiled2d", *COMPILE, *TP)


def _table(path: str) -> pl.DataFrame:
    """Calls and bytes per op x phase (the collectives only), as `analyzer diff` tabulates them."""
    from analyzer.loader import load

    ev = load(path).events
    return (
        ev.filter(pl.col("op").cast(pl.Utf8).str.contains("all_gather|reduce_scatter|all_reduce|broadcast|barrier"))
        .group_by(["op", "phase"])
        .agg(pl.len().alias("calls"), pl.col("out_bytes").sum().alias("bytes"))
        .with_columns(pl.col("op").cast(pl.Utf8), pl.col("phase").cast(pl.Utf8))
        .sort(["op", "phase"])
    )


def test_1d_compile_records_the_eager_comm_pattern(tmp_path):
    eager = _record(tmp_path, "eager")
    compiled = _record(tmp_path, "compiled", *COMPILE)
    d = subprocess.run([os.path.join(BIN, "analyzer"), "diff", eager, compiled], capture_output=True, text=True)
    assert d.returncode == 0, d.stdout
    from analyzer.loader import load

    ev = load(compiled).events.filter(pl.col("step") == 1)
    # FSDP's units are named in the compiled run as in eager: one per block, plus the embeddings and head
    blocks = ev.filter(pl.col("phase").cast(pl.Utf8) == "forward")["module"].cast(pl.Utf8).to_list()
    assert blocks == ["tok_embeddings", *(f"layers.{i}" for i in range(6)), "norm, lm_head"]


def test_2d_compile_issues_the_same_collectives_in_another_order(tmp_path, compiled2d):
    """TP 2: per op x phase the same calls and bytes; inductor orders one TP reduce-scatter
    before an all-gather in each block's backward (docs/torchtitan.md, Under torch.compile)."""
    eager, compiled = _record(tmp_path, "eager2d", *TP), compiled2d
    assert _table(eager).equals(_table(compiled))
    from analyzer.loader import load

    ev = load(compiled).events
    fwd = ev.filter((pl.col("phase").cast(pl.Utf8) == "forward") & (pl.col("step") == 1))
    tp_fwd = fwd.filter(pl.col("op").cast(pl.Utf8).str.contains("reduce_scatter|all_gather"))
    # collectives inside the compiled blocks are the blocks' own, with a TorchTitan frame
    in_blocks = tp_fwd.filter(pl.col("module").cast(pl.Utf8).str.starts_with("layers."))
    assert set(in_blocks["module"].cast(pl.Utf8)) == {f"layers.{i}" for i in range(6)}
    assert all("torchinductor" not in f for f in in_blocks["frame"].cast(pl.Utf8))


def test_async_tp_records_2d_compile_unfused_and_says_so(tmp_path, compiled2d):
    """`--compile.enable_async_tensor_parallel` (TP 2): torch's micro-pipeline TP pass fuses only
    where NCCL and CUDA symmetric memory exist (`micro_pipeline_tp.py`: `is_nccl_available()`),
    so a CPU recording is 2d compile's pattern, per op x phase the same calls and bytes (measured:
    50 backward tp all-gathers, 26 forward reduce-scatters, ...), and the recording says so: a
    note on the command line and in the header."""
    out = str(tmp_path / "asynctp.trace")
    p = subprocess.run(
        [os.path.join(BIN, "tracer"), "record", "--torchtitan", "llama3:llama3_debugmodel", "-n", "2", "--ranks", "0",
         "-o", out, "--", *COMPILE, *TP, "--compile.enable_async_tensor_parallel", *SMALL],
        capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "async TP recorded unfused" in p.stderr + p.stdout
    assert _table(compiled2d).equals(_table(out))
    from analyzer.loader import load

    assert any("micro-pipeline TP pass" in n for n in load(out).header["config"]["torchtitan"]["notes"])
