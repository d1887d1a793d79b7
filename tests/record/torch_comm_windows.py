"""The torch communication corpus's windows (test_torch_comm_corpus.py): per corpus script and
window (its `step`), the collectives per op and per module that the peer test in PyTorch asserts,
with where it asserts them. Data only."""

from __future__ import annotations

from dataclasses import dataclass, field

AR, AG, RS, A2A = "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"


@dataclass(frozen=True)
class Window:
    script: str
    step: int
    peer: str
    """The peer test (and the assertion) the numbers come from."""
    counts: dict[str, dict[str, int]]
    """Direction ("forward": not in backward, as CommDebugMode splits them; "backward";
    "optimizer": an optimizer's step, which the peer counts apart) -> op -> count: every
    collective of the window, exactly."""
    local_counts: dict[str, dict[str, int]] | None = None
    """Local mode's, where torch takes another path under LocalTensorMode (LOCAL_PATH)."""
    root: str = ""
    """The root module's class name (CommDebugMode's first FQN component)."""
    modules: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """CommDebugMode's comm_module_counts entries the peer asserts: "Root.a.b" (or "Global") ->
    direction -> op -> count, a module counting its descendants' collectives."""
    units: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """commtrace's own module column (exclusive): FQN -> direction -> op -> count."""


F, B, OPT = "forward", "backward", "optimizer"
W = Window
WINDOWS = [
    # test_redistribute.py
    W(
        "redistribute",
        1,
        "test_shard_to_replicate_forward_backward: all_gather_into_tensor 1; backward total 0",
        {F: {AG: 1}},
    ),
    W(
        "redistribute",
        3,
        "test_replicate_to_shard_forward_backward: total 0; backward total 1, all_gather 1",
        {B: {AG: 1}},
    ),
    W("redistribute", 5, "test_partial_to_replicate_forward_backward: all_reduce 1; backward total 0", {F: {AR: 1}}),
    W("redistribute", 7, "test_replicate_to_local_partial_grad: total 1, all_reduce 1", {B: {AR: 1}}),
    W("redistribute", 9, "test_partial_to_shard: reduce_scatter_tensor 1", {F: {RS: 1}}),
    W(
        "redistribute",
        11,
        "test_redistribute_shard_dim_change 1-D: CPU all_gather_into_tensor 1 / accelerator shard_dim_alltoall 1",
        {F: {AG: 1}},
        local_counts={F: {A2A: 1}},
    ),
    W(
        "redistribute",
        13,
        "test_redistribute_shard_dim_change 2-D [S0,S1]->[S0,S0]: total 1 ('1: S1 -> S0')",
        {F: {AG: 1}},
        local_counts={F: {A2A: 1}},
    ),
    W(
        "redistribute",
        15,
        "test_redistribute_shard_dim_change 2-D [S0,S1]->[S1,S0]: total 2 ('1: S1 -> R, 0: S0 -> S1, 1: R -> S0')",
        {F: {AG: 2}},
        local_counts={F: {AG: 1, A2A: 1}},
    ),
    W(
        "redistribute",
        17,
        "test_redistribute_shard_dim_change 2-D [S0,S0]->[S1,S1]: total 2 ('1: S0 -> R, 0: S0 -> S1, 1: R -> S1')",
        {F: {AG: 2}},
        local_counts={F: {AG: 1, A2A: 1}},
    ),
    W("redistribute", 19, "test_one_chunk_mesh: total 0", {}),
    # test_comm_mode.py
    W(
        "comm_mode",
        1,
        "test_comm_mode: total 3, all_reduce 1, all_gather_into_tensor 1, reduce_scatter_tensor 1",
        {F: {AR: 1, AG: 1, RS: 1}},
        root="WrapperModel",
        modules={"WrapperModel": {F: {AR: 1, AG: 1, RS: 1}}},
    ),
    W(
        "comm_mode",
        3,
        "test_comm_mode_coalesced: total 3, all_reduce_coalesced 1, all_gather 1, reduce_scatter 1",
        {F: {"all_reduce_coalesced": 1, AG: 1, RS: 1}},
        root="WrapperModelCoalesced",
    ),
    W("comm_mode", 5, "test_comm_mode_with_dtensor: total 1, all_gather_into_tensor 1", {F: {AG: 1}}),
    *[
        W("comm_mode", step, f"test_comm_mode_with_c10d: {c10d} 1, total 1", {F: {op: 1}})
        for step, (c10d, op) in enumerate(
            [
                ("allreduce_", AR),
                ("_allgather_base_", AG),
                ("_reduce_scatter_base_", RS),
                ("broadcast_", "broadcast"),
                ("reduce_", "reduce"),
                ("allgather_", "all_gather"),
                ("allgather_coalesced_", "all_gather_coalesced"),
                ("allgather_into_tensor_coalesced_", "all_gather_into_tensor_coalesced"),
                ("allreduce_coalesced_", "all_reduce_coalesced"),
                ("reduce_scatter_", "reduce_scatter"),
                ("reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced"),
                ("alltoall_", "all_to_all"),
                ("alltoall_base_", A2A),
            ],
            start=6,
        )
    ],
    W("comm_mode_rooted", 0, "test_comm_mode_with_c10d: gather_ 1, total 1", {F: {"gather": 1}}),
    W("comm_mode_rooted", 1, "test_comm_mode_with_c10d: scatter_ 1, total 1", {F: {"scatter": 1}}),
    # test_comm_mode_features.py
    W(
        "comm_mode_features",
        1,
        "test_MLP_module_tracing: comm_module_counts Global / MLPModule / MLPModule.net2 forward all_reduce 1",
        {F: {AR: 1}},
        root="MLPModule",
        modules={"Global": {F: {AR: 1}}, "MLPModule": {F: {AR: 1}}, "MLPModule.net2": {F: {AR: 1}}},
    ),
    W(
        "comm_mode_features",
        3,
        "test_transformer_module_tracing: Global / Transformer forward all_reduce 6, all_gather 1; per leaf",
        {F: {AR: 6, AG: 1}},
        root="Transformer",
        modules={
            "Global": {F: {AR: 6, AG: 1}},
            "Transformer": {F: {AR: 6, AG: 1}},
            "Transformer.tok_embeddings": {F: {AR: 1}},
            "Transformer.pos_embeddings": {F: {AR: 1}},
            **{
                f"Transformer.layers.{i}{leaf}": {F: {AR: n}}
                for i in (0, 1)
                for leaf, n in (
                    ("", 2),
                    (".attention", 1),
                    (".attention.wo", 1),
                    (".feed_forward", 1),
                    (".feed_forward.w2", 1),
                )
            },
            "Transformer.output": {F: {AG: 1}},
        },
    ),
    # test_tp_style.py (the root is the parallelized module itself)
    W("tp_style", 1, "test_colwise_parallel_style: total 0; backward all_reduce 1", {B: {AR: 1}}, root="Linear"),
    W(
        "tp_style",
        3,
        "test_colwise_parallel_style Shard(0) input: all_gather 1; backward reduce_scatter 1, total 2",
        {F: {AG: 1}, B: {RS: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        5,
        "test_rowwise_parallel_style: all_reduce 1, total 1; backward total 1",
        {F: {AR: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        7,
        "test_rowwise_parallel_style Shard(0) output: reduce_scatter 1; backward all_gather 1, total 2",
        {F: {RS: 1}, B: {AG: 1}},
        root="Linear",
    ),
    W(
        "tp_style",
        9,
        "test_rowwise_parallel_embedding: total 1, all_reduce 1; backward total 1",
        {F: {AR: 1}},
        root="Embedding",
    ),
    W(
        "tp_style",
        11,
        "test_rowwise_parallel_embedding Shard(1) output: reduce_scatter 1; backward all_gather 1, total 2",
        {F: {RS: 1}, B: {AG: 1}},
        root="Embedding",
    ),
    W("tp_style", 13, "test_prepare_module_kwargs_input: total 1", {F: {AG: 1}}, root="TestKwargModule"),
    W("tp_style", 15, "test_sequence_parallel_style LayerNorm: total 0", {}, root="LayerNorm"),
    # test_tp_examples.py
    W("tp_examples", 1, "test_mlp_training plain TP: all_reduce 1", {F: {AR: 1}}, root="MLPModule"),
    W(
        "tp_examples",
        3,
        "test_mlp_training sequence parallel: all_gather_into_tensor 2, reduce_scatter_tensor 1",
        {F: {AG: 1, RS: 1}, B: {AG: 1}},
        root="MLPModule",
    ),
    W(
        "tp_examples",
        5,
        "test_transformer_training EXP_BASE_CC: fwd {all_reduce: 6, all_gather: 1}, bwd {all_reduce: 9}, optim {}",
        {F: {AR: 6, AG: 1}, B: {AR: 9}},
        root="Transformer",
    ),
    W(
        "tp_examples",
        7,
        "test_transformer_training EXP_SEQ_PARALLEL_CC: fwd {rs 6, ag 6}, bwd {rs 5, ag 6}, optim {all_reduce: 30}",
        {F: {RS: 6, AG: 6}, B: {RS: 5, AG: 6}, OPT: {AR: 30}},
        root="Transformer",
    ),
    W("tp_examples", 9, "test_loss_parallel: total 3, all_reduce 3; backward total 0", {F: {AR: 3}}),
    # test_math_ops.py
    W(
        "math_ops",
        1,
        "test_layer_norm_bwd shard_dim >= norm_idx: Global forward 1, backward 1",
        {F: {AG: 1}, B: {AG: 1}},
        root="LayerNorm",
        modules={"Global": {F: {AG: 1}, B: {AG: 1}}},
    ),
    W(
        "math_ops",
        3,
        "test_layer_norm_bwd shard_dim < norm_idx: Global forward 0, backward 0",
        {},
        root="LayerNorm",
    ),
    W(
        "math_ops",
        5,
        "test_nll_loss_and_cross_entropy, class-sharded: total 1, all_gather_into_tensor 1",
        {F: {AG: 1}},
    ),
    # test_fully_shard_comm.py: num_blocks 2, so num_blocks + 1 FSDP units
    *[
        W(
            "fsdp_comm",
            step,
            f"test_fully_shard_communication_count reshard_after_forward={raf}: forward _allgather_base_ 3; "
            f"backward _allgather_base_ {bwd_ag}, _reduce_scatter_base_ 3",
            {F: {AG: 3}, B: {AG: bwd_ag, RS: 3} if bwd_ag else {RS: 3}},
            units={
                "": {F: {AG: 1}, B: {AG: 1, RS: 1} if raf not in (False, None) else {RS: 1}},
                **{f"layers.{i}": {F: {AG: 1}, B: {AG: 1, RS: 1} if raf is not False else {RS: 1}} for i in (0, 1)},
            },
        )
        for step, raf, bwd_ag in ((1, True, 3), (3, False, 0), (5, 2, 3), (7, None, 2))
    ],
]
