"""FSDP2 over every rank, gradient clipping to a max norm of 0.05 (the clip is active).

buggy: hand-written clipping on each rank's local shard norm (p.grad.to_local()): every rank
scales its shards by its own coefficient, not the global norm's. healthy:
torch.nn.utils.clip_grad_norm_ (the norm of the full gradients, over the mesh)."""

import torch
import torch.distributed as dist
from common import setup, train, variant
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

MAX_NORM = 0.05

buggy = variant() == "buggy"
model = setup()
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
for m in (model.emb, model.w1, model.w2, model.out):
    fully_shard(m, mesh=mesh)
fully_shard(model, mesh=mesh)


def clip(model):
    params = [p for p in model.parameters() if p.grad is not None]
    if buggy:
        local = torch.stack([p.grad.to_local().pow(2).sum() for p in params]).sum().sqrt()
        coef = (MAX_NORM / (local + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad.to_local().mul_(coef)
    else:
        torch.nn.utils.clip_grad_norm_(params, MAX_NORM)


train(model, after_backward=clip)
