"""FSDP2: three Linear(16,16) units under a root without parameters, 2 training steps.

Usage: fsdp.py [--no-reshard]
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

reshard = "--no-reshard" not in sys.argv
dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp_shard",))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
for layer in (model[0], model[2], model[4]):
    fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(2, 16)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
