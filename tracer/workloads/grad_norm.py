"""Gradient-norm clipping as TorchTitan's clip_grad_norm_ does it (torchtitan/distributed/utils.py),
every step before the optimizer (`training.max_norm`; TorchTitan always clips).

Gradients are DTensors (FSDP shards, tensor-parallel shards): the total norm comes out as a
DTensor with partial placements, and `full_tensor()` all-reduces it over each mesh dim it is
partial on (torch's norm reduction; a size-1 dim issues a size-1 all-reduce). Under pipeline
parallel each stage only sees its own parameters: one more all-reduce over pp (sum of squares).
With expert parallel, expert and non-expert gradients are normed separately (their meshes
differ), each reduced on its own mesh, then combined.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor


def _norm(grads: list[torch.Tensor]) -> torch.Tensor:
    total = torch.nn.utils.get_total_norm(grads, 2.0, False, True)
    return total.full_tensor() if isinstance(total, DTensor) else total


@torch.no_grad()
def clip_(params: list[torch.Tensor], max_norm: float, pp_mesh: DeviceMesh | None, ep_enabled: bool) -> torch.Tensor:
    params = [p for p in params if p.grad is not None]
    if ep_enabled:
        is_ep = [isinstance(p, DTensor) and "ep" in (p.device_mesh.mesh_dim_names or ()) for p in params]
        groups = [[p for p, e in zip(params, is_ep) if e], [p for p, e in zip(params, is_ep) if not e]]
        total = sum(_norm([p.grad for p in g]) ** 2 for g in groups) ** 0.5
    else:
        groups = [params]
        total = _norm([p.grad for p in params])
    if pp_mesh is not None:
        total = total ** 2
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=pp_mesh.get_group())
        total = total ** 0.5
    for g in groups:
        torch.nn.utils.clip_grads_with_norm_(g, max_norm, total, True)
    return total
