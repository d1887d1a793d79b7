"""Sequence parallel and the prepare styles on a 4-way tp mesh, every collective issued by a TP
style's input or output hook (or a user's forward hook). One forward and backward.

norm: SequenceParallel (the sequence-sharded input becomes a Shard(1) DTensor: no collective).
block: PrepareModuleInput all-gathers its Shard(1) input to Replicate (block's pre-hook).
block.net1: ColwiseParallel; a user's forward hook all-reduces a statistic of its output.
block.net2: RowwiseParallel(output_layouts=Shard(1)) reduce-scatters its partial output (output hook).
head: ColwiseParallel(input_layouts=Shard(1)) all-gathers its input (pre-hook).
the root: PrepareModuleOutput all-gathers head's Shard(-1) output to Replicate (root's output hook).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(8, 16, bias=False)
        self.net2 = nn.Linear(16, 8, bias=False)

    def forward(self, x):
        return self.net2(torch.relu(self.net1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.block = Block()
        self.head = nn.Linear(8, 16, bias=False)

    def forward(self, x):
        return self.head(self.block(self.norm(x)))


def log_activation(module, args, out):
    stat = out.detach().float().pow(2).sum().reshape(1)
    dist.all_reduce(stat)


dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
torch.manual_seed(0)
model = Model()
model = parallelize_module(model, mesh, {
    "norm": SequenceParallel(),
    "block": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "block.net1": ColwiseParallel(),
    "block.net2": RowwiseParallel(output_layouts=Shard(1)),
    "head": ColwiseParallel(input_layouts=Shard(1)),
})
model = parallelize_module(model, mesh, PrepareModuleOutput(output_layouts=Shard(-1), desired_output_layouts=Replicate()))
model.block.net1.register_forward_hook(log_activation)
x = torch.randn(2, 2, 8)  # the rank's sequence shard of (2, 8, 8)
model(x).sum().backward()
