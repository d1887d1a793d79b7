"""What the float8 adapter tests share (test_torchtitan_float8.py: rowwise,
test_torchtitan_float8_emulate.py: emulated): TorchTitan 0.3's llama3 debug model with a float8
converter and the built-in workload's twin TOML, both on FSDP 2 x TP 2, 2 steps, seq 64, local
batch 2, rank 0, recorded side by side; the comparison per (mesh dim, op, phase, dtype, reduce op);
and what TorchTitan does outside float8 that the built-in workload does not model (TITAN_ONLY,
pinned in test_torchtitan_match.py too). Data and helpers only: no test here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
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
TITAN_ONLY = {
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
}
"""TorchTitan's differences from the built-in workload that have nothing to do with float8."""


def record_pair(folder, toml: str, torchtitan: str, pythonpath: str = "") -> tuple:
    """(built-in, TorchTitan) traces, rank 0 of 4, recorded side by side in `folder`;
    `pythonpath` is prepended for a config module outside TorchTitan (`--torchtitan MODULE:CONFIG`)."""
    from analyzer.loader import load

    builtin, titan = str(folder / "builtin.trace"), str(folder / "torchtitan.trace")
    logs = [folder / "builtin.log", folder / "torchtitan.log"]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    args = [
        ["record", toml, "--ranks", "0", "-o", builtin],
        ["record", "--torchtitan", torchtitan, "-n", "4", "--ranks", "0", "-o", titan, "--", *LAYOUT, *SMALL],
    ]
    with open(logs[0], "w") as log_b, open(logs[1], "w") as log_t:
        procs = [
            subprocess.Popen([os.path.join(BIN, "tracer"), *a], stdout=log, stderr=subprocess.STDOUT, env=env)
            for a, log in zip(args, (log_b, log_t))
        ]
        for p in procs:
            p.wait(timeout=900)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log.read_text()[-3000:]
    return load(builtin), load(titan)


def events(trace) -> pl.DataFrame:
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


def volume(trace) -> dict[tuple, tuple[int, int]]:
    """(calls, output bytes) per KEY."""
    agg = events(trace).group_by(KEY).agg(pl.len().alias("calls"), pl.col("out_bytes").sum().alias("bytes"))
    return {tuple(r[k] for k in KEY): (r["calls"], r["bytes"]) for r in agg.iter_rows(named=True)}


def differing(pair) -> dict[tuple, tuple[int, int]]:
    """(calls, bytes) TorchTitan - built-in for every KEY where the two differ."""
    b, t = (volume(x) for x in pair)
    return {
        k: (t.get(k, (0, 0))[0] - b.get(k, (0, 0))[0], t.get(k, (0, 0))[1] - b.get(k, (0, 0))[1])
        for k in b.keys() | t.keys()
        if b.get(k) != t.get(k)
    }


def same_rows_outside(pair, known: dict) -> bool:
    """Every KEY outside `known` present on both sides or neither: the whole training step."""
    b, t = (volume(x) for x in pair)
    return {k for k in b if k not in known} == {k for k in t if k not in known}


def assert_nothing_in_float8(trace) -> None:
    """No float8 (or uint8: FSDP2's mixed-dtype buffer) collective but the seed broadcast, no amax on fsdp."""
    ev = events(trace)
    assert ev.filter(pl.col("dtype").str.contains("float8|uint8") & (pl.col("op") != "broadcast")).is_empty()
    assert ev.filter((pl.col("dim") == "fsdp") & (pl.col("reduce_op") == "max")).is_empty()
    assert set(ev.filter(pl.col("dim") == "tp")["dtype"]) == {"bfloat16", "float32", "float64"}


def assert_bf16_fsdp_all_gathers(trace) -> None:
    """Forward, each step: tok_embeddings, the 6 blocks, [norm, lm_head], bf16 (2 bytes/element)."""
    ev = events(trace).filter((pl.col("dim") == "fsdp") & (pl.col("phase") == "forward"))
    assert set(ev["op"]) == {"all_gather_into_tensor"} and set(ev["dtype"]) == {"bfloat16"}
    assert ev["out_bytes"].to_list() == [EMBED_AG, *[BLOCK_AG] * 6, HEAD_AG] * STEPS
    assert (ev["in_bytes"] * 2 == ev["out_bytes"]).all()


def assert_plain_tp(trace) -> None:
    """Per step: each block's two sequence-parallel all-gathers of (2, 64, 256) bf16 (and the one
    before lm_head), each block's two reduce-scatters back to Shard(1), + embeddings' one."""
    ev = events(trace).filter((pl.col("dim") == "tp") & (pl.col("phase") == "forward"))
    ag = ev.filter(pl.col("op") == "all_gather_into_tensor")
    assert set(ag["dtype"]) == {"bfloat16"}
    assert ag["out_bytes"].to_list() == [2 * 64 * 256 * 2] * (2 * 6 + 1) * STEPS
    rs = ev.filter(pl.col("op") == "reduce_scatter_tensor")
    assert set(rs["dtype"]) == {"bfloat16"} and rs.height == (2 * 6 + 1) * STEPS


def amax_all_reduces(trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The float64 all_reduce(max) (torchao's amax, upcast before DTensor resolves its Partial):
    (outside lm_head, lm_head's); all of them on tp."""
    ev = events(trace).filter((pl.col("reduce_op") == "max") & (pl.col("dtype") == "float64"))
    assert set(ev["dim"]) == {"tp"}
    return ev.filter(~pl.col("module").is_in(LM_HEAD)), ev.filter(pl.col("module").is_in(LM_HEAD))
