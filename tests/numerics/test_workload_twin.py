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
