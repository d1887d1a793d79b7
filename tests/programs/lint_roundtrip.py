"""Seeded for `analyzer lint`: a DTensor redistributed Shard(0) -> Replicate -> Shard(0) with
nothing in between, in module `proj`.

A 1-D tp mesh of all ranks; an 8 x 8 activation sharded on rows. Per forward, `proj` first
round-trips it in one statement (all_gather_into_tensor [2, 8] -> [8, 8], then a local chunk
back: no compute between), then does what it meant: gathers it (Shard(0) -> Replicate) for a
matmul with a replicated weight. 2 forwards (steps are not counted: no optimizer).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


class Proj(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.mesh = mesh
        self.w = distribute_tensor(torch.randn(8, 8), mesh, [Replicate()])

    def forward(self, x):
        x = x.redistribute(self.mesh, [Replicate()]).redistribute(self.mesh, [Shard(0)])
        full = x.redistribute(self.mesh, [Replicate()])
        return full @ self.w


class Net(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.proj = Proj(mesh)

    def forward(self, x):
        return self.proj(x)


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
torch.manual_seed(0)
net = Net(mesh)
for _ in range(2):
    net(distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)]))
