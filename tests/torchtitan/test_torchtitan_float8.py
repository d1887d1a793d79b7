"""float8 through the TorchTitan adapter against the built-in workload, same layout (#28 item 3).

TorchTitan 0.3's `llama3_debugmodel_float8` (Float8LinearConverter, torchao's "rowwise" recipe:
TorchTitan 0.3 has no other; SM89 answered as an H100) on FSDP 2 x TP 2, 2 steps, seq 64, local
batch 2, rank 0 recorded, and the built-in workload's twin, llama3_debug_float8.toml next to this
file (`recipe_name = "rowwise"`). Both run torchao's own Float8Linear; what a rowwise recipe
communicates (docs/float8.md, "TorchTitan 0.3: rowwise"):

- FSDP all-gathers the bf16 weights: no float8 / uint8 all-gather, no amax all-reduce on fsdp
  (torchao's float8 all-gather is tensorwise only; scales are per row, computed after the gather);
- TP keeps the plain styles: bf16 sequence-parallel all-gathers and reduce-scatters;
- the per-row amax of a cast whose row runs along a tp-sharded dim is Partial(max): DTensor
  all-reduces it over tp (float64: amax_to_scale's upcast comes first). Per block, forward: wo and
  w2's Shard(-1) input (128 token rows: 1024 bytes) and Shard(1) weight (256 output rows: 2048);
  backward: wqkv, w1, w3's Shard(-1) output gradient (1024) and their Shard(0) weight for the input
  gradient (256 input rows: 2048), plus selective AC's recompute of the 4 forward ones.

The two must be equal per (mesh dim, op, phase, dtype, reduce op) but for what TorchTitan does that
the built-in workload does not model, pinned in tests/torchtitan/test_torchtitan_match.py and here
on one rank: the chunked loss's (8 chunks) extra tp all-reduces, its [norm, lm_head] re-gathers, the
set-up broadcasts and barrier, and one float8 consequence of the chunks: lm_head's two backward
amax all-reduces happen per chunk (16 tokens' gradient rows: 128 bytes; the weight's 2048) instead
of once per step (1024, 2048).
"""

from __future__ import annotations

import importlib.util
import os

import polars as pl
import pytest
from float8_pair import (
    CHUNKS,
    STEPS,
    TITAN_ONLY,
    amax_all_reduces,
    assert_bf16_fsdp_all_gathers,
    assert_nothing_in_float8,
    assert_plain_tp,
    differing,
    record_pair,
    same_rows_outside,
)

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed"),
]
TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama3_debug_float8.toml")
KNOWN = {
    **TITAN_ONLY,  # (dim, op, phase, dtype, reduce_op): (calls, bytes) TorchTitan - built-in, rank 0, 2 steps
    # lm_head's backward amax all-reduces per chunk: 8 x (128 + 2048) instead of 1024 + 2048
    ("tp", "all_reduce", "backward", "float64", "max"): (
        (2 * CHUNKS - 2) * STEPS,
        (CHUNKS * (128 + 2048) - (1024 + 2048)) * STEPS,
    ),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(built-in, TorchTitan) traces, rank 0 of 4, recorded side by side."""
    return record_pair(tmp_path_factory.mktemp("float8"), TOML, "llama3:llama3_debugmodel_float8")


def test_same_collectives_per_dim_op_phase_dtype_except_the_known_differences(pair):
    assert differing(pair) == KNOWN
    # and every row neither side lacks: the whole training step, float8 casts included
    assert same_rows_outside(pair, KNOWN)


def test_rowwise_communicates_nothing_in_float8(pair):
    for trace in pair:
        assert_nothing_in_float8(trace)


def test_fsdp_all_gathers_stay_bf16_per_unit(pair):
    for trace in pair:
        assert_bf16_fsdp_all_gathers(trace)


def test_tp_collectives_use_the_plain_styles(pair):
    for trace in pair:
        assert_plain_tp(trace)


def test_amax_all_reduces_per_linear_equal_and_hand_derived(pair):
    # tp all_reduce(max) in float64, per Linear in program order: forward, wo and w2 (input 1024,
    # weight 2048); backward (with selective AC's recompute of those) wqkv, w1, w3 (grad 1024,
    # weight 2048); the same list on both sides, module by module, outside lm_head
    (b, b_head), (t, t_head) = (amax_all_reduces(x) for x in pair)
    cols = ["step", "phase", "module", "in_bytes", "out_bytes"]
    assert b.select(cols).equals(t.select(cols))
    fwd = b.filter((pl.col("phase") == "forward") & (pl.col("step") == 1))
    linears = [f"layers.{i}.{w}" for i in range(6) for w in ("attention.wo", "attention.wo", "feed_forward.w2",
                                                                "feed_forward.w2")]  # fmt: skip
    assert fwd["module"].to_list() == linears and fwd["out_bytes"].to_list() == [1024, 2048] * 12
    bwd = b.filter((pl.col("phase") == "backward") & (pl.col("step") == 1))
    per_block = bwd.group_by(pl.col("module").str.extract(r"\.(\w+)$")).agg(pl.len(), pl.col("out_bytes").sum())
    assert dict(per_block.select("module", "len").iter_rows()) == {"wqkv": 12, "wo": 12, "w1": 12, "w2": 12, "w3": 12}
    assert bwd["out_bytes"].sum() == 6 * (5 * (1024 + 2048))
    # lm_head (loss-parallel: Shard(-1) output gradient, Shard(0) weight): backward only
    assert b_head["phase"].to_list() == ["backward"] * 2 * STEPS and b_head["out_bytes"].to_list() == [1024, 2048] * 2
    assert t_head["phase"].to_list() == ["backward"] * 2 * CHUNKS * STEPS
    assert t_head["out_bytes"].to_list() == [128, 2048] * CHUNKS * STEPS
