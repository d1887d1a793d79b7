"""Tensor + sequence parallel MLP on a 4-way tp mesh, 2 training steps.

w1 ColwiseParallel taking a sequence-sharded input, w2 RowwiseParallel producing a
sequence-sharded output: per step, forward all-gather + reduce-scatter, backward the same.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(16, 32, bias=False)
        self.w2 = nn.Linear(32, 16, bias=False)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
torch.manual_seed(0)
model = parallelize_module(MLP(), mesh, {
    "w1": ColwiseParallel(input_layouts=Shard(1)),
    "w2": RowwiseParallel(output_layouts=Shard(1)),
})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(2, 8 // dist.get_world_size() * dist.get_world_size() // 4 * 2, 16)  # (2, 4, 16) per rank
    out = model(x)
    out.to_local().sum().backward() if hasattr(out, "to_local") else out.sum().backward()
    opt.step()
    opt.zero_grad()
