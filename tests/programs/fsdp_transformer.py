"""FSDP2 on torch's own nn.TransformerEncoder (2 layers, d_model 32), torchrun style, 2 steps.

Every layer is its own FSDP unit, the encoder the root (it holds no parameters of its own).
A layer has 8,544 parameters (in_proj 96x32 + 96, out_proj 32x32 + 32, linear1 64x32 + 64,
linear2 32x64 + 32, two LayerNorms 2 x 64), every dim 0 divisible by 4: a 2,136-element shard
per rank. Per step and layer: an all-gather in forward, again in backward (resharded after
forward), one reduce-scatter of its gradients.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

world = int(os.environ["WORLD_SIZE"])
dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
for block in model.layers:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(2):
    torch.manual_seed(step)
    x = torch.randn(2, 8, 32)
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
