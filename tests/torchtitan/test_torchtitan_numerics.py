"""TorchTitan 0.3 through the adapter in local mode with --numerics against its 1-rank twin
(#29 item 5): examples/numerics/torchtitan_fsdp.toml (llama3 debug model, FSDP 2, 2 steps) and
torchtitan_fsdp_twin.toml (one rank, both dp ranks' synthetic batches at once, the same seed).
Equal within tolerance. Before the adapter initialised local mode's weights as one device does
(one_device_init.py), the first numerics_divergence was the token embedding's output at step 0,
forward (relative error 0.068): on a CPU mesh every FSDP shard drew its init from the same seed.
A twin of one dp batch (half the global batch) is caught at that same first value:
tok_embeddings, step 0, forward."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from conftest import REPO, run_tracer

pytestmark = [
    pytest.mark.records,
    pytest.mark.torchtitan,
    pytest.mark.skipif(
        importlib.util.find_spec("torchtitan") is None,
        reason="TorchTitan is not installed (pip install -c constraints-cpu.txt '.[torchtitan]')",
    ),
]

EXAMPLES = os.path.join(REPO, "examples", "numerics")


def test_torchtitan_fsdp_matches_its_one_rank_twin(tmp_path):
    par, twin, half = (str(tmp_path / f"{n}.trace") for n in ("par", "twin", "half"))
    with open(os.path.join(EXAMPLES, "torchtitan_fsdp_twin.toml")) as f:
        text = f.read()
    half_toml = tmp_path / "half.toml"  # the twin of one dp rank's batch: half the global batch
    half_toml.write_text(text.replace("local_batch_size = 2", "local_batch_size = 1").replace("twin_of_dp = 2", ""))
    for toml, out in (
        (os.path.join(EXAMPLES, "torchtitan_fsdp.toml"), par),
        (os.path.join(EXAMPLES, "torchtitan_fsdp_twin.toml"), twin),
        (str(half_toml), half),
    ):
        proc = run_tracer("tracer", "record", toml, "-o", out, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_tracer("analyzer", "numerics", par, "--ref", twin, "--json")
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["findings"]) == (0, []), proc.stdout
    # each dp rank's loss is normalised by the global token count: the global loss is their sum
    assert any("combine as their sum at step(s) 0-1" in n for n in out["trace"]["notes"])
    proc = run_tracer("analyzer", "numerics", par, "--ref", half, "--json")
    findings = json.loads(proc.stdout)["findings"]
    assert proc.returncode == 1, proc.stdout
    assert [(f["kind"], f["step"], f["phase"]) for f in findings] == [("numerics_divergence", 0, "forward")]
    assert findings[0]["module"] == "tok_embeddings", findings[0]


def test_torchtitan_fsdp_tp_matches_its_one_rank_twin(tmp_path):
    """FSDP 2 x TP 2 with loss parallel (examples/numerics/torchtitan_fsdp_tp.toml) against the
    twin of its 2 dp batches. Before local_plain.py the first numerics_divergence was the loss
    at step 0, exactly half the twin's: TorchTitan's token count, `torch.tensor(0)` then `+=`
    per rank, summed all 4 ranks' tokens in one shared tensor (64 instead of 32)."""
    par, twin = (str(tmp_path / f"{n}.trace") for n in ("par", "twin"))
    for toml, out in (("torchtitan_fsdp_tp.toml", par), ("torchtitan_fsdp_twin.toml", twin)):
        proc = run_tracer("tracer", "record", os.path.join(EXAMPLES, toml), "-o", out, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_tracer("analyzer", "numerics", par, "--ref", twin, "--json")
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["findings"]) == (0, []), proc.stdout
    assert any("combine as their sum at step(s) 0-1" in n for n in out["trace"]["notes"])
