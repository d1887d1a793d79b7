"""The tensor-parallel MLP of PyTorch's CommDebugMode tutorial and test_tp_examples.py, on a
4-way tp mesh: net1 ColwiseParallel, net2 RowwiseParallel. One forward and backward.

Per forward: net2's partial output becomes replicated by one all-reduce, issued in net2's own
output hook (RowwiseParallel), so it belongs to net2. Backward issues nothing (x needs no grad).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
torch.manual_seed(0)
model = parallelize_module(MLP(), mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
x = torch.randn(4, 8)
model(x).sum().backward()
