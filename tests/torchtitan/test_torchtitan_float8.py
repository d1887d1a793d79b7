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
import subprocess
import sys

import polars as pl
import pytest

pytestmark = [
    pytest.mark.torchtitan,
    pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None, reason="TorchTitan is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed"),
]
BIN = os.path.dirname(sys.executable)
TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama3_debug_float8.toml")
LAYOUT = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"]
SMALL = ["--training.steps", "2", "--training.seq_len", "64", "--training.local_batch_size", "2"]
STEPS, CHUNKS = 2, 8
KEY = ["dim", "op", "phase", "dtype", "reduce_op"]
LM_HEAD = ("output", "FSDPFloat8Linear")
"""The lm_head's module on each side: the built-in's `output`; TorchTitan's, called by the chunked
loss outside the model's forward, is attributed to its class."""
BLOCK_AG, EMBED_AG, HEAD_AG = 852_992, 524_288, 524_800
"""FSDP all-gather output bytes (bf16) on one rank: a block's Linears (wqkv 768x256, wo 256x256,
w1, w3 768x256, w2 256x768) / tp 2 + its two norms (256 each, replicated over tp); tok_embeddings
2048x256 / 2; [norm, lm_head] 256 + 2048x256 / 2; x 2 bytes."""
KNOWN = {
    # (dim, op, phase, dtype, reduce_op): (calls, bytes) TorchTitan - built-in, rank 0, 2 steps
    # the chunked loss's loss-parallel cross-entropy: max and 2 sums per chunk, not per step
    ("tp", "all_reduce", "other", "float32", "max"): ((CHUNKS - 1) * STEPS, 0),
    ("tp", "all_reduce", "other", "float32", "sum"): (2 * (CHUNKS - 1) * STEPS, 0),
    # [norm, lm_head] gathered again for the chunks' backward, reduce-scattered in two parts; on
    # step 2 gathered once more before the chunks
    ("fsdp", "all_gather_into_tensor", "backward", "bfloat16", None): (STEPS, STEPS * HEAD_AG),
    ("fsdp", "reduce_scatter_tensor", "backward", "float32", "premul_sum"): (STEPS, 0),
    ("fsdp", "all_gather_into_tensor", "other", "bfloat16", None): (1, HEAD_AG),
    # set-up: the seed broadcast, 6 rotary tables (64 x 8 x 2 fp32) from tp rank 0, one barrier
    ("world", "broadcast", "other", "uint8", None): (1, 8),
    ("tp", "broadcast", "other", "float32", None): (6, 6 * 64 * 8 * 2 * 4),
    ("world", "barrier", "other", None, None): (1, 0),
    # lm_head's backward amax all-reduces per chunk: 8 x (128 + 2048) instead of 1024 + 2048
    ("tp", "all_reduce", "backward", "float64", "max"): (
        (2 * CHUNKS - 2) * STEPS,
        (CHUNKS * (128 + 2048) - (1024 + 2048)) * STEPS,
    ),
}


def _run(args: list[str], log) -> subprocess.Popen:
    return subprocess.Popen([os.path.join(BIN, "tracer"), *args], stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(built-in, TorchTitan) traces, rank 0 of 4, recorded side by side."""
    from analyzer.loader import load

    d = tmp_path_factory.mktemp("float8")
    builtin, titan = str(d / "builtin.trace"), str(d / "torchtitan.trace")
    logs = [d / "builtin.log", d / "torchtitan.log"]
    with open(logs[0], "w") as log_b, open(logs[1], "w") as log_t:
        procs = [
            _run(["record", TOML, "--ranks", "0", "-o", builtin], log_b),
            _run(["record", "--torchtitan", "llama3:llama3_debugmodel_float8", "-n", "4", "--ranks", "0", "-o", titan,
                  "--", *LAYOUT, *SMALL], log_t),
        ]  # fmt: skip
        for p in procs:
            p.wait(timeout=900)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log.read_text()[-3000:]
    return load(builtin), load(titan)


def _events(trace) -> pl.DataFrame:
    """Rank 0's collectives (no waits, no group creation) with their mesh dim, strings as strings."""
    strings = [pl.col(c).cast(pl.Utf8) for c in ("op", "phase", "dtype", "reduce_op", "module")]
    return (
        trace.events.filter(pl.col("rank") == 0)
        .join(trace.groups.select("gid", pl.col("label").alias("dim")), left_on="group", right_on="gid", how="left")
        .with_columns(strings)
        .filter(pl.col("op").str.contains("all_gather|reduce_scatter|all_reduce|broadcast|barrier|all_to_all"))
        .with_columns(pl.col("module").str.replace_all(r"_checkpoint_wrapped_module\.|qkv_linear\.", ""))
        .sort("idx")
    )


def _volume(trace) -> dict[tuple, tuple[int, int]]:
    agg = _events(trace).group_by(KEY).agg(pl.len().alias("calls"), pl.col("out_bytes").sum().alias("bytes"))
    return {tuple(r[k] for k in KEY): (r["calls"], r["bytes"]) for r in agg.iter_rows(named=True)}


def test_same_collectives_per_dim_op_phase_dtype_except_the_known_differences(pair):
    b, t = (_volume(x) for x in pair)
    differing = {
        k: (t.get(k, (0, 0))[0] - b.get(k, (0, 0))[0], t.get(k, (0, 0))[1] - b.get(k, (0, 0))[1])
        for k in b.keys() | t.keys()
        if b.get(k) != t.get(k)
    }
    assert differing == KNOWN
    # and every row neither side lacks: the whole training step, float8 casts included
    assert {k for k in b if k not in KNOWN} == {k for k in t if k not in KNOWN}


def test_rowwise_communicates_nothing_in_float8(pair):
    # no float8 (or uint8: FSDP2's mixed-dtype buffer) collective anywhere, no amax on fsdp
    for trace in pair:
        ev = _events(trace)
        assert ev.filter(pl.col("dtype").str.contains("float8|uint8") & (pl.col("op") != "broadcast")).is_empty()
        assert ev.filter((pl.col("dim") == "fsdp") & (pl.col("reduce_op") == "max")).is_empty()
        assert set(ev.filter(pl.col("dim") == "tp")["dtype"]) == {"bfloat16", "float32", "float64"}


def test_fsdp_all_gathers_stay_bf16_per_unit(pair):
    # forward, each step: tok_embeddings, the 6 blocks, [norm, lm_head], bf16 (2 bytes/element)
    for trace in pair:
        ev = _events(trace).filter((pl.col("dim") == "fsdp") & (pl.col("phase") == "forward"))
        assert set(ev["op"]) == {"all_gather_into_tensor"} and set(ev["dtype"]) == {"bfloat16"}
        assert ev["out_bytes"].to_list() == [EMBED_AG, *[BLOCK_AG] * 6, HEAD_AG] * STEPS
        assert (ev["in_bytes"] * 2 == ev["out_bytes"]).all()


def test_tp_collectives_use_the_plain_styles(pair):
    # per step: each block's two sequence-parallel all-gathers of (2, 64, 256) bf16 (and the one
    # before lm_head), each block's two reduce-scatters back to Shard(1), + embeddings' one
    for trace in pair:
        ev = _events(trace).filter((pl.col("dim") == "tp") & (pl.col("phase") == "forward"))
        ag = ev.filter(pl.col("op") == "all_gather_into_tensor")
        assert ag["out_bytes"].to_list() == [2 * 64 * 256 * 2] * (2 * 6 + 1) * STEPS
        rs = ev.filter(pl.col("op") == "reduce_scatter_tensor")
        assert set(rs["dtype"]) == {"bfloat16"} and rs.height == (2 * 6 + 1) * STEPS


def test_amax_all_reduces_per_linear_equal_and_hand_derived(pair):
    # tp all_reduce(max) in float64, per Linear in program order: forward, wo and w2 (input 1024,
    # weight 2048); backward (with selective AC's recompute of those) wqkv, w1, w3 (grad 1024,
    # weight 2048); the same list on both sides, module by module, outside lm_head
    def amax(trace):
        ev = _events(trace).filter((pl.col("reduce_op") == "max") & (pl.col("dtype") == "float64"))
        assert set(ev["dim"]) == {"tp"}
        return ev.filter(~pl.col("module").is_in(LM_HEAD)), ev.filter(pl.col("module").is_in(LM_HEAD))

    (b, b_head), (t, t_head) = amax(pair[0]), amax(pair[1])
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
