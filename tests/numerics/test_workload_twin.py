"""The built-in workload against its 1-rank twin: examples/fsdp.toml (FSDP2 over 4 ranks, each
its own batch, bf16 parameters) recorded in local mode with --numerics, and
examples/numerics/fsdp_twin.toml (one rank, the 4 dp ranks' batches at once). Equal within
tolerance: the layout computes what one device computes. (Before the workload normalised its
loss by the global token count, this comparison found its gradients 4x the twin's: the first
numerics_divergence was tok_embeddings.weight's gradient at step 0.)"""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO, run_tracer

pytestmark = pytest.mark.records


def test_fsdp_matches_its_one_rank_twin(tmp_path):
    par, twin = str(tmp_path / "fsdp4.trace"), str(tmp_path / "fsdp1.trace")
    for args in (
        [os.path.join(REPO, "examples", "fsdp.toml"), "--mode", "local", "--numerics", "-o", par],
        [os.path.join(REPO, "examples", "numerics", "fsdp_twin.toml"), "-o", twin],
    ):
        proc = run_tracer("tracer", "record", *args, timeout=900)
        assert proc.returncode == 0, proc.stderr
    proc = run_tracer("analyzer", "numerics", par, "--ref", twin, "--json")
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["findings"]) == (0, []), proc.stdout
    # 4 dp ranks, 4 batches: the loss is their sum (each normalised by the global token count)
    assert any("combine as their sum at step(s) 0-1" in n for n in out["trace"]["notes"])


MODEL = """[model]
name = "llama3"
dim = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
vocab_size = 128
multiple_of = 32

[training]
steps = 2
seq_len = 16
local_batch_size = 2

[comm]
mode = "local_tensor"
"""

# FSDP 2 x tensor + sequence parallel 2 with loss parallel (vocab-sharded logits): 4 ranks
FSDP_TP = (
    MODEL
    + """
[parallelism]
data_parallel_shard_degree = 2
tensor_parallel_degree = 2
enable_sequence_parallel = true
disable_loss_parallel = false

[tracer]
world_size = 4
numerics = true
"""
)


def _twin(dp: int) -> str:
    return MODEL + f"\n[tracer]\nworld_size = 1\ntwin_of_dp = {dp}\nnumerics = true\n"


def test_fsdp_tp_matches_its_one_rank_twin(tmp_path):
    """A tensor-parallel layout (FSDP 2 x TP + SP 2, loss parallel) against its twin of 2 dp
    batches: equal within tolerance. The twin of 1 dp batch (half the data) is not: the first
    numerics_divergence is the first module's output, tok_embeddings at step 0, forward."""
    paths = {}
    for name, text in (("par", FSDP_TP), ("twin", _twin(2)), ("half", _twin(1))):
        toml, paths[name] = tmp_path / f"{name}.toml", str(tmp_path / f"{name}.trace")
        toml.write_text(text)
        proc = run_tracer("tracer", "record", str(toml), "-o", paths[name], timeout=900)
        assert proc.returncode == 0, proc.stderr
    proc = run_tracer("analyzer", "numerics", paths["par"], "--ref", paths["twin"], "--json")
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["findings"]) == (0, []), proc.stdout
    proc = run_tracer("analyzer", "numerics", paths["par"], "--ref", paths["half"], "--json")
    findings = json.loads(proc.stdout)["findings"]
    assert proc.returncode == 1, proc.stdout
    assert [(f["kind"], f["module"], f["step"], f["phase"]) for f in findings] == [
        ("numerics_divergence", "tok_embeddings", 0, "forward")
    ], proc.stdout
