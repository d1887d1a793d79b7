"""Expert parallel: each ep rank holds n_experts / ep experts; tokens travel to their experts
and back with all_to_all_single, whose split sizes come from the routing (data-dependent).

Per MoE layer, forward: one all_to_all of per-expert token counts (so each rank learns how
many tokens it will receive), one all_to_all dispatching the tokens, one combining the expert
outputs back. Backward: the two token all_to_alls again, splits swapped (the counts need no
gradient). This is TorchTitan's token-choice dispatch without its padding/permute kernels.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard, distribute_tensor


def apply(model: nn.Module, ep_mesh: DeviceMesh) -> None:
    """Shard every block's experts on dim 0 over `ep_mesh` and route through it."""
    for block in model.layers.values():
        moe = block.moe
        for name in ("w1", "w2", "w3"):
            w = getattr(moe.experts, name)
            # src_data_rank=None: same seed on every rank, so each keeps its own experts
            setattr(moe.experts, name, nn.Parameter(distribute_tensor(w.data, ep_mesh, [Shard(0)],
                                                                      src_data_rank=None)))
        moe.ep_group = ep_mesh.get_group()


def dispatch_and_combine(moe, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """routed: (tokens * top_k, dim) sorted by expert; counts: tokens per (global) expert."""
    group = moe.ep_group
    ep = group.size()
    local = moe.n_experts // ep
    # how many tokens each rank sends to each of my experts: (ep * local,), by source rank
    recv_counts = funcol.all_to_all_single(counts, None, None, group=group).wait()
    send_splits = counts.view(ep, local).sum(1).tolist()
    recv_splits = recv_counts.view(ep, local).sum(1).tolist()
    received = funcol.all_to_all_single_autograd(routed, recv_splits, send_splits, group=group)
    # received rows come grouped by source rank, then by expert: label each with its local expert
    expert_ids = torch.repeat_interleave(torch.arange(local).repeat(ep), recv_counts.view(-1))
    out = moe.experts(received, expert_ids)
    return funcol.all_to_all_single_autograd(out, send_splits, recv_splits, group=group)
