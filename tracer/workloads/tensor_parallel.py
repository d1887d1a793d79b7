"""Tensor parallel (+ sequence parallel) with TorchTitan's llama3 plan.

Colwise wq/wk/wv and w1/w3, rowwise wo and w2: one all-reduce-worth of communication per
attention and per feed-forward. With sequence parallel the norms and residual stream hold
Shard(1) (a slice of the sequence), so each region starts with an all-gather of its input and
ends with a reduce-scatter of its output instead of an all-reduce; the norms' weights stay
replicated, so their gradients are all-reduced over tp. With loss parallel the output
projection's logits stay sharded on the vocab dim (the loss reduces over tp itself, see
loss.py); without it they are gathered back to Replicate.

With float8 (model.converters = ["float8"]) the blocks use torchao's float8 styles, as TorchTitan's
apply_tp(enable_float8_tensorwise_tp=True) does (tracer/workloads/float8.py); tok_embeddings,
norm and output keep the plain ones; a rowwise recipe keeps the plain styles everywhere (bf16 TP).
"""

from __future__ import annotations

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)


def apply(
    model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool, loss_parallel: bool, float8: bool = False
) -> None:
    """Parallelize `model` (a whole Transformer or one pipeline stage of it) in place."""
    seq = Shard(1) if sequence_parallel else Replicate()
    # src_data_rank=None: every rank built the same weights from the same seed, so each keeps
    # its own slice instead of receiving it from rank 0 (TorchTitan inits after sharding: same)
    top: dict = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.norm is not None:
        top["norm"] = SequenceParallel() if sequence_parallel else None
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1) if loss_parallel else Replicate())
    parallelize_module(model, tp_mesh, {k: v for k, v in top.items() if v is not None}, src_data_rank=None)
    rowwise, colwise, prepare = (RowwiseParallel, ColwiseParallel, PrepareModuleInput)
    if float8:
        from tracer.workloads.float8 import tp_styles

        rowwise, colwise, prepare = tp_styles()
    for block in model.layers.values():
        plan = {
            "attention": prepare(input_layouts=(seq, None), desired_input_layouts=(Replicate(), None)),
            **({"attention.wqkv": colwise()} if hasattr(block.attention, "wqkv") else
               {f"attention.{w}": colwise() for w in ("wq", "wk", "wv")}),
            "attention.wo": rowwise(output_layouts=seq),
            "feed_forward": prepare(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": colwise(),
            "feed_forward.w2": rowwise(output_layouts=seq),
            "feed_forward.w3": colwise(),
        }
        if sequence_parallel:
            plan["attention_norm"] = SequenceParallel()
            plan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, plan, src_data_rank=None)
