"""Emulated float8 through the TorchTitan adapter against the built-in workload, same layout (#28).

TorchTitan 0.3's Float8LinearConverter with `emulate=True` drops the recipe and builds torchao's
`Float8LinearConfig(emulate=True)` (torchtitan/components/quantization/float8.py): tensorwise
scaling of every cast, no float8 FSDP all-gather (torchao's default), and TorchTitan 0.3 has no
float8 TP styles. Its only shipped config with it adds LoRA (`llama3_debugmodel_float8_emulate_lora`),
so titan_float8_emulate.py (next to this file) is `llama3_debugmodel_float8` with `emulate=True`
alone. Recorded on FSDP 2 x TP 2, 2 steps, seq 64, local batch 2, rank 0, against the built-in
twin llama3_debug_float8_emulate.toml (`converters = ["quantize.linear.float8"]`: Float8Linear,
plain TP; no recipe: tensorwise; no enable_fsdp_float8_all_gather: bf16 all-gathers).

What tensorwise communicates, by hand: FSDP and TP as without float8 (bf16 all-gathers,
reduce-scatters), and one all_reduce(max) over tp of a float64 scalar (8 bytes: amax_to_scale
upcasts before DTensor resolves the Partial(max) of torch.max) per cast of a tp-sharded tensor.
torchao's Float8Linear casts 6 tensors per Linear (forward: input, weight; backward: the output
gradient twice, for grad_input and grad_weight, the weight for grad_input, the input for
grad_weight), each with its own amax. Under the plain TP plan:
- ColwiseParallel (wqkv, w1, w3, lm_head): input Replicate, weight Shard(0), output gradient
  Shard(-1): forward 1 (weight), backward 3 (gradient twice, weight);
- RowwiseParallel (wo, w2): input Shard(-1), weight Shard(1), output gradient Replicate (the
  gradient of a Partial output): forward 2, backward 2 (weight, input);
- selective op AC recomputes each block's forward casts in backward (aten.max is saved, but the
  Partial it returns is all-reduced again where the recomputed cast reads it): + 7 per block.
Per block and step: forward 1 + 2 + 1 + 1 + 2 = 7, backward 4 per Linear = 20; lm_head 1 + 3 per
loss call (TorchTitan's chunked loss: 8 calls per step). A rowwise recording has row vectors
(1024 / 2048 bytes) and 4 forward amaxes per block; a float8 all-gather is uint8: both fail here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import polars as pl
import pytest
from float8_pair import (
    CHUNKS,
    HERE,
    STEPS,
    TITAN_ONLY,
    amax_all_reduces,
    assert_bf16_fsdp_all_gathers,
    assert_nothing_in_float8,
    assert_plain_tp,
    differing,
    events,
    record_pair,
    same_rows_outside,
)

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed"),
]
REPO = os.path.dirname(os.path.dirname(HERE))
TOML = os.path.join(HERE, "llama3_debug_float8_emulate.toml")
SPEC = "titan_float8_emulate:llama3_debugmodel_float8_emulate"
AMAX = 8
"""One tensorwise amax: a float64 scalar."""
FWD = {"attention.wqkv": 1, "attention.wo": 2, "feed_forward.w1": 1, "feed_forward.w3": 1, "feed_forward.w2": 2}
"""Forward amax all-reduces per block Linear (colwise: the weight; rowwise: input and weight)."""
BWD = {w: 4 for w in FWD}
"""Backward: colwise 3 (output gradient x 2, weight) + 1 recomputed; rowwise 2 (weight, input) + 2 recomputed."""
HEAD_FWD, HEAD_BWD = 1, 3
"""lm_head (colwise, loss parallel) per loss call: the weight; the output gradient x 2 and the weight."""
KNOWN = {
    **TITAN_ONLY,  # (dim, op, phase, dtype, reduce_op): (calls, bytes) TorchTitan - built-in, rank 0, 2 steps
    # lm_head's casts run per chunk of the chunked loss: 8 calls per step instead of 1
    ("tp", "all_reduce", "forward", "float64", "max"): ((CHUNKS - 1) * HEAD_FWD * STEPS, (CHUNKS - 1) * AMAX * STEPS),
    ("tp", "all_reduce", "backward", "float64", "max"): (
        (CHUNKS - 1) * HEAD_BWD * STEPS,
        (CHUNKS - 1) * HEAD_BWD * AMAX * STEPS,
    ),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(built-in, TorchTitan) traces, rank 0 of 4, recorded side by side."""
    return record_pair(tmp_path_factory.mktemp("float8_emulate"), TOML, SPEC, pythonpath=HERE)


def test_same_collectives_per_dim_op_phase_dtype_except_the_known_differences(pair):
    assert differing(pair) == KNOWN
    assert same_rows_outside(pair, KNOWN)


def test_emulated_communicates_nothing_in_float8(pair):
    # no float8 all-gather (torchao's default), plain TP: bf16 per FSDP unit, bf16 sequence parallel
    for trace in pair:
        assert_nothing_in_float8(trace)
        assert_bf16_fsdp_all_gathers(trace)
        assert_plain_tp(trace)


def test_tensorwise_amax_all_reduces_per_linear_equal_and_hand_derived(pair):
    (b, b_head), (t, t_head) = (amax_all_reduces(x) for x in pair)
    cols = ["step", "phase", "module", "in_bytes", "out_bytes"]
    assert b.select(cols).equals(t.select(cols))  # module by module, in program order
    for trace_amax in (b, t, b_head, t_head):
        assert set(trace_amax["out_bytes"]) == {AMAX} and set(trace_amax["in_bytes"]) == {AMAX}
    for step in range(STEPS):
        fwd = b.filter((pl.col("phase") == "forward") & (pl.col("step") == step))
        assert fwd["module"].to_list() == [
            f"layers.{i}.{w}" for i in range(6) for w, n in FWD.items() for _ in range(n)
        ]
        bwd = b.filter((pl.col("phase") == "backward") & (pl.col("step") == step))
        per_linear = bwd.group_by(pl.col("module").str.extract(r"^layers\.\d+\.(.+)$")).len()
        assert dict(per_linear.iter_rows()) == {w: 6 * n for w, n in BWD.items()}
        assert fwd.height + bwd.height == 6 * (7 + 20)
    for head, calls in ((b_head, 1), (t_head, CHUNKS)):
        phases = head.group_by("phase").len()
        assert dict(phases.iter_rows()) == {"forward": HEAD_FWD * calls * STEPS, "backward": HEAD_BWD * calls * STEPS}


def test_torchtitan_side_is_tensorwise_not_rowwise(pair):
    """What tells the recipes apart, on the TorchTitan side: tensorwise amaxes are scalars, and
    the wo / w2 casts come in pairs per forward (rowwise: the same count, but 1024 / 2048 bytes;
    wqkv, w1, w3 have no forward amax under rowwise)."""
    ev = events(pair[1])
    assert ev.filter((pl.col("reduce_op") == "max") & (pl.col("dtype") == "float64"))["out_bytes"].max() == AMAX
    colwise_fwd = ev.filter(
        (pl.col("phase") == "forward") & (pl.col("reduce_op") == "max") & pl.col("module").str.contains(r"wqkv|w1|w3")
    )
    assert colwise_fwd.height == 3 * 6 * STEPS
    assert ev.filter(pl.col("dim") == "fsdp")["dtype"].is_in(["bfloat16", "float32"]).all()


@pytest.mark.slow
def test_torchtitans_own_emulate_lora_test_records_clean_and_tensorwise(tmp_path):
    """TorchTitan's integration test float8_emulate_lora (titan_cases.py: TP 2 x PP 2, 8 ranks;
    LoRA on wq / wkv / wo) as bench/titan_matrix.py records it (ranks 0 and 7, about 50 s): zero
    findings, and the same tensorwise signature: every amax a float64 scalar on tp, nothing in float8."""
    from analyzer.loader import load

    out = tmp_path / "m.json"
    p = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "titan_matrix.py"), "--only", "float8_emulate_lora",
         "--json", str(out), "--work", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=900,
    )  # fmt: skip
    assert out.exists(), p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["test"], r["status"]) for r in rows] == [("float8_emulate_lora", "clean")], rows
    trace = load(str(tmp_path / "float8_emulate_lora" / "v0.trace"))
    ev = trace.events.join(trace.groups.select("gid", pl.col("label").alias("dim")), left_on="group", right_on="gid")
    ev = ev.with_columns(pl.col(c).cast(pl.Utf8) for c in ("op", "dtype", "reduce_op"))
    amax = ev.filter((pl.col("reduce_op") == "max") & (pl.col("dtype") == "float64"))
    assert amax.height > 0 and set(amax["dim"]) == {"tp"} and set(amax["out_bytes"]) == {AMAX}
    assert set(amax["rank"]) == {0, 7}
    collectives = ev.filter(~pl.col("op").str.contains("send|recv|broadcast"))
    assert collectives.filter(pl.col("dtype").str.contains("float8|uint8")).is_empty()
    assert set(ev.filter((pl.col("dim") == "fsdp") & pl.col("op").str.contains("all_gather"))["dtype"]) == {"bfloat16"}
