"""Activation checkpointing as TorchTitan applies it (torchtitan/distributed/activation_checkpoint.py),
before FSDP, one checkpoint wrapper per transformer block.

What it changes in the comm pattern: backward recomputes the block's forward, and with it the
forward's collectives that were not saved. FSDP's all-gathers are not among them (FSDP wraps
the checkpoint wrapper, and the recompute calls the inner block, past FSDP's hooks).
- "full": every block recomputed, so every tensor-parallel collective of its forward
  (sequence-parallel all-gathers and reduce-scatters, MoE all_to_alls) runs again in backward.
  early_stop=False, as TorchTitan sets it: the recompute runs to the block's end, so even the
  last reduce-scatter (whose output backward does not need) is reissued.
- "selective" with option "op" (TorchTitan 0.3's SelectiveAC): op-level policy that saves the
  outputs of compute-heavy ops (every other matmul), reduce_scatter_tensor and
  all_to_all_single; everything else, all_gather_into_tensor included, is recomputed. Under
  sequence parallel each block's two input all-gathers run again in backward, its reduce-scatters
  do not.
- "selective" with an integer option N (TorchTitan 0.2's layer-level SAC): full recompute of
  every N-th block (blocks N-1, 2N-1, ...), the others untouched.
- "none": nothing recomputed.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

MODES = ("none", "selective", "full")


def save_ops() -> set:
    """TorchTitan's default save list: the partitioner's compute-intensive ops, attention,
    linear, topk, max, and the comms whose outputs are worth keeping."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    aten, c10d = torch.ops.aten, torch.ops._c10d_functional
    ops |= {aten._scaled_dot_product_attention_math.default, aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_fused_attention_overrideable.default, aten.max.default,
            aten.linear.default, aten.topk.default, c10d.reduce_scatter_tensor.default,
            c10d.all_to_all_single.default}
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention"):
        if hasattr(aten, name):
            ops.add(getattr(aten, name).default)
    return ops


def _op_policy():
    """Save every op in save_ops() except every second matmul (counted separately in forward
    and in recompute, so both make the same choices)."""
    saved, mm_ops = save_ops(), (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
        key = "recompute" if ctx.is_recompute else "forward"
        if func in mm_ops:
            counts[key] += 1
        if func in saved:
            if func in mm_ops and counts[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply(model: nn.Module, mode: str, option: str) -> None:
    """Wrap every block of `model` (a whole Transformer or one pipeline stage) in place."""
    if mode == "none":
        return
    for name, block in list(model.layers.items()):
        if mode == "full" or (option != "op" and (int(name) + 1) % int(option) == 0):
            wrapped = checkpoint_wrapper(block, preserve_rng_state=True, early_stop=False)
        elif option == "op":
            wrapped = checkpoint_wrapper(block, preserve_rng_state=True, early_stop=False,
                                         context_fn=lambda: create_selective_checkpoint_contexts(_op_policy()))
        else:
            continue
        model.layers[name] = wrapped
