"""Tensor parallel inside FSDP2 on a 2-D mesh (dp 2 x tp 2), torchrun style, 2 steps.

An MLP: w1 ColwiseParallel (16 -> 32), w2 RowwiseParallel (32 -> 16), then fully_shard over dp.
Setup on tp: parallelize_module scatters w1 (Shard(0)) and w2 (Shard(1)): [16, 16] each.
Per step on tp: the RowwiseParallel output all_reduce ([4, 16], forward); the input needs no
gradient, so backward has none. On dp (one FSDP unit, the root, not resharded after forward):
one all-gather of the parameters (w1 + w2 local after TP: 512 elements, 256 per dp rank) and
one reduce-scatter (avg) of the gradients.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(16, 32, bias=False)
        self.w2 = nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)
model = parallelize_module(MLP(), mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
fully_shard(model, mesh=mesh["dp"])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    torch.manual_seed(step)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
