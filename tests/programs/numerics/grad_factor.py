"""2-D mesh (dp x tp = 2 x 2 on 4 ranks, 1 x 1 on one): w1 / w2 tensor parallel over tp,
gradients averaged over dp by hand (all_reduce over the dp group, then a division).

buggy: divides by the world size (4) instead of the dp size (2): every gradient is half what it
should be (the same on every rank, so replicas agree). healthy: divides by the dp size."""

import torch.distributed as dist
from common import setup, train, variant
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

buggy = variant() == "buggy"
model = setup()
world = dist.get_world_size()
tp = 2 if world % 2 == 0 else 1
mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
parallelize_module(model, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})


def average(model):
    for p in model.parameters():
        g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
        dist.all_reduce(g, group=mesh.get_group("dp"))
        g.div_(world if buggy else mesh["dp"].size())


train(model, after_backward=average)
