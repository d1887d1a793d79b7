"""Goldens recorded from TorchTitan 0.3.0 itself (tracer/adapters/torchtitan), pipeline and MoE,
checked torch-free so CI guards them where TorchTitan is not installed:

- traces/torchtitan_llama3_fsdp_tp_pp_{1f1b,interleaved}.trace: `tracer record --torchtitan
  llama3:llama3_debugmodel -n 8 -- --training.steps 2 --training.seq_len 64
  --training.local_batch_size 2 --parallelism.data_parallel_shard_degree 2
  --parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_degree 2
  --parallelism.pipeline_parallel_schedule 1F1B` (or Interleaved1F1B);
- traces/torchtitan_deepseek_v3_fsdp_ep.trace: `--torchtitan deepseek_v3:deepseek_v3_debugmodel
  -n 8 -- ... --parallelism.data_parallel_shard_degree 8 --parallelism.expert_parallel_degree 4`.

The counts below are derived from the configs, not read off the recordings. Mesh [pp 2, fsdp 2,
tp 2]: ranks 0-3 hold pipeline rank 0, ranks 4-7 pipeline rank 1, each rank's pp peer is r +- 4.
Microbatches M = local_batch_size 2 / pipeline_parallel_microbatch_size 1 = 2. A stage boundary
carries the layer output of one microbatch as the local shard of a sequence-parallel DTensor:
1 sample x 64/2 tokens x dim 256 in bf16 = 16384 bytes, activations forward, gradients back.
Re-recording these with TorchTitan and comparing is tests/torchtitan/test_torchtitan_pipeline.py.
"""

from __future__ import annotations

import os

import polars as pl
import pytest
from conftest import REPO

from analyzer.checks import run_checks
from analyzer.loader import load

BOUNDARY_BYTES = 1 * (64 // 2) * 256 * 2
"""One microbatch's activation (or its gradient) at a stage boundary, per rank."""
M = 2
"""Microbatches per step."""


@pytest.fixture(scope="module")
def golden():
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load(os.path.join(REPO, "traces", f"torchtitan_{name}.trace"))
        return cache[name]

    return get


def _labelled(t) -> pl.DataFrame:
    return t.events.join(t.groups.select(pl.col("gid").alias("group"), "label"), on="group")


def _p2p(t, rank: int, step: int) -> pl.DataFrame:
    ev = _labelled(t)
    return ev.filter(
        (pl.col("rank") == rank)
        & (pl.col("step") == step)
        & (pl.col("label") == "pp")
        & pl.col("op").is_in(["send", "recv"])
    )


def _bytes(df: pl.DataFrame) -> pl.Series:
    return df["in_bytes"] + df["out_bytes"]  # a send's bytes are its input, a recv's its output


@pytest.mark.parametrize("name", ["llama3_fsdp_tp_pp_1f1b", "llama3_fsdp_tp_pp_interleaved", "deepseek_v3_fsdp_ep"])
def test_torchtitan_golden_has_no_findings(golden, name):
    t = golden(name)
    assert t.ranks == list(range(8)) and t.header["config"]["torchtitan"]["version"].startswith("0.3")
    assert run_checks(t).findings == []


@pytest.mark.parametrize(
    "schedule, sends, recvs",
    [
        # 1F1B, one stage per rank: stage 0 sends M activations and receives M gradients;
        # stage 1 the other way round
        ("1f1b", {0: M, 4: M}, {0: M, 4: M}),
        # Interleaved1F1B, 2 virtual stages per rank (4 stages: rank 0 holds 0 and 2, rank 4
        # holds 1 and 3). Rank 0 sends M activations 0->1 and M 2->3 and M gradients 2->1;
        # it receives M activations 1->2 and M gradients 3->2 and M 1->0. Rank 4 mirrors it.
        ("interleaved", {0: 3 * M, 4: 3 * M}, {0: 3 * M, 4: 3 * M}),
    ],
)
def test_pipeline_sends_and_recvs_per_microbatch(golden, schedule, sends, recvs):
    t = golden(f"llama3_fsdp_tp_pp_{schedule}")
    for rank in range(8):
        stage_rank = rank - rank % 4  # 0 or 4: the same pattern on every rank of a pp rank
        ev = _p2p(t, rank, step=1)  # step 1: the steady state (no warm-up)
        assert ev.filter(pl.col("op") == "send").height == sends[stage_rank], rank
        assert ev.filter(pl.col("op") == "recv").height == recvs[stage_rank], rank
        assert set(ev["peer"].to_list()) == {rank + 4 if rank < 4 else rank - 4}
        assert set(ev["dtype"].cast(pl.Utf8).to_list()) == {"bfloat16"}
        assert set(_bytes(ev).to_list()) == {BOUNDARY_BYTES}


def test_1f1b_order_on_each_stage(golden):
    """1F1B with 2 stages, M = 2: stage 0 runs F0 F1 B0 B1, sending each forward's output and
    receiving each backward's input; the steady state fuses F1's send with B0's receive into
    one batch_isend_irecv. Stage 1 receives F0, then (F0's backward sends its gradient while
    F1's input is received), ..."""
    t = golden("llama3_fsdp_tp_pp_1f1b")
    ops0 = [(r["op"], r["batch"] >= 0) for r in _p2p(t, 0, 1).iter_rows(named=True)]
    assert ops0 == [("send", False), ("send", True), ("recv", True), ("recv", False)]
    ops4 = [r["op"] for r in _p2p(t, 4, 1).iter_rows(named=True)]
    assert ops4 == ["recv", "send", "recv", "send"]


@pytest.mark.parametrize(
    "schedule, boundaries",
    [("1f1b", 1), ("interleaved", 3)],  # stage boundaries: 2 stages -> 1, 4 stages -> 3
)
def test_pipeline_warmup_on_the_first_step_only(golden, schedule, boundaries):
    """Step 0 adds torch pipelining's warm-up to the steady state: the static-shape vote (an
    int32 passed forward over every boundary and its result passed back) and the shape
    metadata (send_object_list over every boundary forward, and the gradient metadata back:
    an int64 size and the uint8 pickle each)."""
    t = golden(f"llama3_fsdp_tp_pp_{schedule}")
    for rank in (0, 4):
        first, steady = _p2p(t, rank, 0), _p2p(t, rank, 1)
        extra = first.height - steady.height
        votes = first.filter(pl.col("dtype").cast(pl.Utf8) == "int32")
        sizes = first.filter(pl.col("dtype").cast(pl.Utf8) == "int64")
        pickles = first.filter(pl.col("dtype").cast(pl.Utf8) == "uint8")
        assert votes.height == 2 * boundaries and set(_bytes(votes).to_list()) == {4}
        assert sizes.height == pickles.height == 2 * boundaries and set(_bytes(sizes).to_list()) == {8}
        assert extra == votes.height + sizes.height + pickles.height
        assert _p2p(t, rank, 1).filter(pl.col("dtype").cast(pl.Utf8) != "bfloat16").is_empty()


def test_pipeline_fsdp_units_once_per_step_not_per_microbatch(golden):
    """The 6 blocks split 3 + 3 (TorchTitan weighs the embedding and the output as a layer each,
    so stage 0 is [tok_embeddings, layers 0-2] and stage 1 [layers 3-5, norm, lm_head]). With
    pipelining, FSDP keeps a stage's units gathered across its microbatches: stage 0 gathers each
    of its 4 units once per step in forward (not M times) and reduce-scatters each once after the
    last microbatch's backward (the schedule's reduction, outside autograd). On the first step
    the stage's shape inference runs one more forward first (after the static-shape vote, before
    the shape metadata is sent), and reshards after it: the units are gathered twice."""
    t = golden("llama3_fsdp_tp_pp_1f1b")
    ev = _labelled(t).filter((pl.col("rank") == 0) & (pl.col("label") == "fsdp"))
    units = ["tok_embeddings", "layers.0", "layers.1", "layers.2"]
    for step, gathers in ((0, 2 * units), (1, units)):
        s = ev.filter(pl.col("step") == step)
        fwd = s.filter((pl.col("op") == "all_gather_into_tensor") & (pl.col("phase") == "forward"))
        assert fwd["module"].cast(pl.Utf8).to_list() == gathers
        rs = s.filter(pl.col("op") == "reduce_scatter_tensor")
        assert sorted(rs["module"].cast(pl.Utf8).to_list()) == sorted(units)


def test_pipeline_frames_point_into_torchtitan(golden):
    """Forward collectives come from TorchTitan's model (decoder blocks) and its TP
    redistribution (protocols/module.py); pipeline p2p from the trainer's schedule call."""
    t = golden("llama3_fsdp_tp_pp_interleaved")
    ev = _labelled(t).filter((pl.col("rank") == 0) & (pl.col("step") == 1))
    frames = ev["frame"].cast(pl.Utf8)
    assert frames.str.starts_with("torchtitan/").all(), frames.unique().to_list()
    fwd = ev.filter((pl.col("phase") == "forward") & pl.col("label").is_in(["fsdp", "tp"]))
    assert set(fwd["frame"].cast(pl.Utf8).str.extract(r"^([^:]+):").to_list()) <= {
        "torchtitan/models/common/decoder.py",
        "torchtitan/protocols/module.py",
    }
    assert set(_p2p(t, 0, 1)["frame"].cast(pl.Utf8).str.extract(r"^([^:]+):").to_list()) == {"torchtitan/trainer.py"}


def test_moe_expert_parallel_all_to_alls_per_layer(golden):
    """deepseek_v3 debug model: 6 blocks, the first dense, 5 MoE. With EP 4 each MoE block's
    forward exchanges its token counts per expert (int64, 8 experts) and then dispatches and
    combines the routed tokens (2 bf16 all-to-alls); backward all-to-alls the gradients of the
    dispatch and the combine (2; the counts carry no gradient)."""
    t = golden("deepseek_v3_fsdp_ep")
    ev = _labelled(t).filter(
        (pl.col("rank") == 0)
        & (pl.col("step") == 1)
        & (pl.col("label") == "ep")
        & (pl.col("op") == "all_to_all_single")
    )
    fwd = ev.filter(pl.col("phase") == "forward")
    assert fwd["dtype"].cast(pl.Utf8).to_list() == ["int64", "bfloat16", "bfloat16"] * 5
    assert set(fwd.filter(pl.col("dtype").cast(pl.Utf8) == "int64")["in_bytes"].to_list()) == {8 * 8}
    bwd = ev.filter(pl.col("phase") == "backward")
    assert bwd.height == 2 * 5 and set(bwd["dtype"].cast(pl.Utf8).to_list()) == {"bfloat16"}
