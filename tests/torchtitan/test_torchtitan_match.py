"""Same config, same pattern: the built-in workload against TorchTitan 0.3 itself.

traces/torchtitan_llama3_{fsdp,hsdp}_tp.trace were recorded from TorchTitan 0.3.0 through the
adapter (`tracer record --torchtitan llama3:llama3_debugmodel -n 8 --
--parallelism.data_parallel_shard_degree 4 --parallelism.tensor_parallel_degree 2
--training.steps 2 --training.seq_len 64 --training.local_batch_size 2`; HSDP: replicate 2,
shard 2); examples/llama3_debug_{fsdp,hsdp}_tp.toml are the same jobs for the built-in workload.
`analyzer diff` of the two (aliases on, group creation and size-1 groups out) shows the same
collectives per mesh dim x op x phase with the same dtypes, except what TorchTitan does that the
built-in workload does not model (README, "Built-in vs TorchTitan"), pinned here call by call,
so CI guards the match without TorchTitan installed.
"""

import os

import polars as pl
import pytest
from conftest import REPO

from analyzer.compare.diff import diff_traces
from analyzer.compare.normalize import normalize
from analyzer.loader import load

RANKS, STEPS = 8, 2
KNOWN = {
    # (dim, op, phase): (calls B - A, bytes B - A), all ranks, 2 steps
    # TorchTitan's ChunkedLossWrapper (8 chunks) runs lm_head + loss outside the model's forward:
    # the loss-parallel cross-entropy's 3 tp all-reduces per chunk instead of 3 per step (same
    # bytes: the chunks split the same 128 tokens); [norm, lm_head] gathered again for the
    # chunks' backward, and its gradients reduce-scattered in two parts (lm_head's, then norm's:
    # the same bytes); on step 2 gathered once more before the chunks (phase "other").
    ("tp", "all_reduce", "other"): ((24 - 3) * STEPS * RANKS, 0),
    ("fsdp", "all_gather_into_tensor", "backward"): (STEPS * RANKS, STEPS * RANKS * 262400 * 2),
    ("fsdp", "reduce_scatter_tensor", "backward"): (STEPS * RANKS, 0),
    ("fsdp", "all_gather_into_tensor", "other"): (RANKS, RANKS * 262400 * 2),
    # set-up: the seed broadcast (8 bytes from rank 0), each block's rotary table made a
    # Replicate DTensor from tp rank 0 (64 x 8 x 2 fp32 with seq 64), and one barrier
    ("world", "broadcast", "other"): (RANKS, RANKS * 8),
    ("tp", "broadcast", "other"): (6 * RANKS, 6 * RANKS * 64 * 8 * 2 * 4),
    ("world", "barrier", "other"): (RANKS, 0),
}


HSDP = {
    **KNOWN,
    # the chunked loss's two-part reduce-scatter of [norm, lm_head]: each part is all-reduced
    # across the replicas (same bytes)
    ("dp_replicate", "all_reduce", "backward"): (STEPS * RANKS, 0),
}
CONFIGS = {"fsdp_tp": KNOWN, "hsdp_tp": HSDP}
SAME = {
    ("batch", "all_reduce", "other"),
    ("loss_mesh", "all_reduce", "other"),
    ("fsdp", "all_gather_into_tensor", "forward"),
    ("fsdp", "all_reduce", "other"),
    ("tp", "all_gather_into_tensor", "forward"),
    ("tp", "all_gather_into_tensor", "backward"),
    ("tp", "reduce_scatter_tensor", "forward"),
    ("tp", "reduce_scatter_tensor", "backward"),
    ("tp", "all_reduce", "backward"),
}
"""Rows with the same calls and bytes on both sides: the whole training step but the above."""


def _pair(name):
    builtin = load(os.path.join(REPO, "traces", f"llama3_debug_{name}.trace"))
    torchtitan = load(os.path.join(REPO, "traces", f"torchtitan_llama3_{name}.trace"))
    return builtin, torchtitan


@pytest.mark.parametrize("name", CONFIGS)
def test_builtin_golden_is_the_example_recorded(name):
    # test_golden re-records examples/llama3_debug_*.toml against its golden: the built-in side
    # of this comparison is the workload as it runs today
    b, _ = _pair(name)
    assert b.header["config"]["config_file"] == os.path.join("examples", f"llama3_debug_{name}.toml")


@pytest.mark.parametrize("name", CONFIGS)
def test_same_collectives_per_dim_op_phase_except_the_known_differences(name):
    d = diff_traces(*_pair(name))
    rows = {(r["dim"], r["op"], r["phase"]): r for r in d.volume.iter_rows(named=True)}
    differing = {
        k: (r["calls_delta"], r["bytes_delta"]) for k, r in rows.items() if r["calls_delta"] or r["bytes_delta"]
    }
    assert differing == CONFIGS[name]
    assert {k for k in rows if k not in CONFIGS[name]} == SAME


@pytest.mark.parametrize("name", CONFIGS)
def test_same_dtypes_and_shapes_per_dim_op_phase(name):
    # beyond counts and bytes: the set of signatures (op, dim, dtype, shapes, reduce op) each
    # side issues per phase, outside the known differences, is the same
    known = pl.DataFrame(list(CONFIGS[name]), schema=["dim", "op", "phase"], orient="row")

    def sigs(trace):
        n = normalize(trace).join(known, on=["dim", "op", "phase"], how="anti")
        return set(n.select("sig", "phase").unique().iter_rows())

    b, t = _pair(name)
    assert sigs(b) == sigs(t)


@pytest.mark.parametrize("name", CONFIGS)
def test_first_divergence_is_a_communication_difference(name):
    # without normalization TorchTitan's group creation (every size-1 dim) would diverge at
    # event 1; normalized, the first difference is TorchTitan's seed broadcast, then the
    # chunked loss's all-reduces
    d = diff_traces(*_pair(name))
    assert len(d.divergences) == 1 and d.divergences[0].ranks == list(range(RANKS))
    div = d.divergences[0]
    assert div.event_b["sig"] == "broadcast world/8 uint8 in=[[8]] out=[[8]] root=0"
    assert [r.kind for r in div.runs][:2] == ["inserted", "changed"]
