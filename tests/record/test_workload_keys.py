"""The built-in workload honours the TorchTitan keys that change communication, with counts
derived by hand (FSDP 2 x TP 2 + sequence parallel, 4 ranks, 2 blocks, 1 step unless said).

Per step and rank, tensor parallel with sequence parallel, L blocks:
- forward: 2 all-gathers (attention and feed-forward inputs) and 2 reduce-scatters (wo, w2
  outputs) per block, + 1 reduce-scatter (tok_embeddings) + 1 all-gather (output's input);
- backward without recompute mirrors it: 2L + 1 all-gathers, 2L + 1 reduce-scatters.
- selective AC ("op") recomputes each block's forward minus its saved ops, reduce_scatter_tensor
  among them: + 2 all-gathers per block; full AC recomputes the whole forward: + 2 all-gathers
  and + 2 reduce-scatters per block; layer-level selective "2" fully recomputes every 2nd block.
"""

import pytest
from conftest import REPO, stream

from tracer.config.pipeline_split import stage_modules

AG, RS, AR = "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"

CONFIG = """
[model]
dim = 64
n_layers = {layers}
n_heads = 4
n_kv_heads = 2
vocab_size = 128
multiple_of = 32
[training]
steps = 1
seq_len = 16
local_batch_size = 2
{training}
[parallelism]
data_parallel_shard_degree = {fsdp}
tensor_parallel_degree = 2
{parallelism}
[activation_checkpoint]
{ac}
[tracer]
world_size = 4
"""


def record(tmp_path, name, *, layers=2, training="", parallelism="", ac="", fsdp=2):
    from analyzer.loader import load
    from tracer.record.golden import record_example

    path = tmp_path / f"{name}.toml"
    path.write_text(CONFIG.format(layers=layers, training=training, parallelism=parallelism, ac=ac, fsdp=fsdp))
    out = str(tmp_path / f"{name}.trace")
    record_example(str(path), out, REPO)
    return load(out)


def tp_counts(t, rank=0):
    ev = [e for e in stream(t, rank) if e["group"] and e["group"][0] == "tp"]
    count = lambda op, phase: sum(1 for e in ev if e["op"] == op and e["phase"] == phase)
    return {
        "ag_fwd": count(AG, "forward"),
        "ag_bwd": count(AG, "backward"),
        "rs_fwd": count(RS, "forward"),
        "rs_bwd": count(RS, "backward"),
    }


@pytest.mark.parametrize(
    "ac,ag_bwd,rs_bwd",
    [
        ('mode = "none"', 5, 5),  # 2L + 1 each
        ('mode = "selective"\nselective_ac_option = "op"', 9, 5),  # + 2 all-gathers per block
        ('mode = "full"', 9, 9),  # + 2 all-gathers, + 2 reduce-scatters per block
        ('mode = "selective"\nselective_ac_option = "2"', 7, 7),  # block 1 only: + 2 and + 2
    ],
)
def test_activation_checkpointing_recomputes_tensor_parallel_collectives(tmp_path, ac, ag_bwd, rs_bwd):
    t = record(tmp_path, "ac", ac=ac)
    for rank in range(4):
        assert tp_counts(t, rank) == {"ag_fwd": 5, "ag_bwd": ag_bwd, "rs_fwd": 5, "rs_bwd": rs_bwd}


def test_mixed_precision_sets_dtypes_and_bytes(tmp_path):
    # [norm, output] unit per fsdp rank: tp-local 64 + 64 x 64 = 4160 params -> 2080 per rank.
    # bf16 params: all-gather 2080 x 2 bytes in; fp32 params: 4 bytes. Reduce dtype: the
    # reduce-scatter's. Activations follow the params: the tp all-gathers are bf16 / fp32.
    def unit(t, op):
        return next(e for e in stream(t, 0) if e["op"] == op and e["module"] == "norm, output")

    bf16 = record(tmp_path, "bf16", ac='mode = "none"')
    fp32 = record(
        tmp_path,
        "fp32",
        ac='mode = "none"',
        training='mixed_precision_param = "float32"\nmixed_precision_reduce = "bfloat16"',
    )
    ag, ag32 = unit(bf16, AG), unit(fp32, AG)
    assert (ag["dtype"], ag["in_shapes"], ag["in_bytes"]) == ("bfloat16", [[2080]], 2080 * 2)
    assert (ag32["dtype"], ag32["in_shapes"], ag32["in_bytes"]) == ("float32", [[2080]], 2080 * 4)
    assert (unit(bf16, RS)["dtype"], unit(fp32, RS)["dtype"]) == ("float32", "bfloat16")
    tp = lambda t: {e["dtype"] for e in stream(t, 0) if e["op"] == AG and e["group"][0] == "tp"}
    assert (tp(bf16), tp(fp32)) == ({"bfloat16"}, {"float32"})


def test_grad_norm_all_reduces_once_per_partial_mesh_dim_per_step(tmp_path):
    # after backward, outside any module: the per-parameter norms (2 blocks x 9 + embeddings,
    # norm, output = 21) are partial over fsdp and over tp: one fp32 all-reduce on each, per step
    t = record(tmp_path, "norm", ac='mode = "none"')
    for rank in range(4):
        norms = [(e["group"][0], e["in_shapes"]) for e in stream(t, rank) if e["op"] == AR and e["in_shapes"] == [[21]]]
        assert norms == [("fsdp", [[21]]), ("tp", [[21]])]


def test_loss_parallel_keeps_logits_sharded(tmp_path):
    # on (default): the loss takes 3 tp all-reduces of 32 x 1 fp32 (max, sum, sum), the logits
    # are never gathered. off: the logits (2, 16, 128 / 2) are all-gathered to (2, 16, 128) in
    # forward (along the last dim: through dim 0 as (4, 16, 64)) in output's output hook, filed
    # under output (the module whose hook issued it); the loss needs no tp collective.
    def tp_ops(t):
        return [
            (e["op"], e["out_shapes"], e["reduce_op"])
            for e in stream(t, 0)
            if e["group"]
            and e["group"][0] == "tp"
            and e["op"] in (AG, AR)
            and e["phase"] in ("forward", "other")
            and e["module"] in ("output", "")
        ]

    on = record(tmp_path, "lp_on", ac='mode = "none"')
    off = record(tmp_path, "lp_off", ac='mode = "none"', parallelism="disable_loss_parallel = true")
    seq_gather = (AG, [[4, 8, 64]], None)  # the output's input: sequence-sharded -> whole
    assert tp_ops(on) == [seq_gather] + [(AR, [[32, 1]], op) for op in ("max", "sum", "sum")] + [(AR, [[21]], "sum")]
    assert tp_ops(off) == [seq_gather, (AG, [[4, 16, 64]], None), (AR, [[21]], "sum")]


def test_uneven_pipeline_split_as_torchtitan(tmp_path):
    # TorchTitan counts tok_embeddings and norm + output as a layer each
    assert stage_modules(4, 6) == [
        ["tok_embeddings", "layers.0"],
        ["layers.1", "layers.2"],
        ["layers.3", "layers.4"],
        ["layers.5", "norm", "output"],
    ]
    assert stage_modules(4, 4) == [
        ["tok_embeddings", "layers.0"],
        ["layers.1", "layers.2"],
        ["layers.3"],
        ["norm", "output"],
    ]
    assert stage_modules(2, 3) == [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "norm", "output"]]
    assert stage_modules(2, 3, input_weight=2) == [
        ["tok_embeddings", "layers.0"],
        ["layers.1", "layers.2", "norm", "output"],
    ]
    # recorded: pp 2 x tp 2, 3 blocks: stage 0 (ranks 0, 1) runs blocks 0 and 1, stage 1 block 2
    t = record(
        tmp_path,
        "pp",
        layers=3,
        fsdp=1,
        ac='mode = "none"',
        parallelism='pipeline_parallel_degree = 2\npipeline_parallel_schedule = "1F1B"\nmicrobatches = 2',
    )
    for rank, blocks in (
        (0, {"layers.0", "layers.1"}),
        (1, {"layers.0", "layers.1"}),
        (2, {"layers.2"}),
        (3, {"layers.2"}),
    ):
        mods = {
            e["module"].split(".attention")[0]
            for e in stream(t, rank)
            if e["op"] == AG and e["group"][0] == "tp" and ".attention" in (e["module"] or "")
        }
        assert mods == blocks
        # grad norm over pp as well: one sum all-reduce of a scalar per step
        assert [e["op"] for e in stream(t, rank) if e["group"] and e["group"][0] == "pp" and e["op"] == AR] == [AR]


def test_every_mesh_dim_is_created_even_at_size_one(workload):
    t, _ = workload("fsdp")
    sizes = {g["label"]: g["size"] for g in t.groups.iter_rows(named=True)}
    assert {k: sizes[k] for k in ("pp", "dp_replicate", "cp", "tp", "ep")} == dict.fromkeys(
        ("pp", "dp_replicate", "cp", "tp", "ep"), 1
    )
