"""Seeded bug: on a 2 x 4 (dp, tp) mesh of 8 ranks, rank 5 skips its tp all-reduce of the
second layer; the layers' all-reduces have different sizes, so a positional match would see a
wall of shape mismatches after the skip."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
for step in range(2):
    for layer in range(4):
        if not (dist.get_rank() == 5 and step == 0 and layer == 1):
            dist.all_reduce(torch.ones(8 + layer), group=tp)
    dist.all_reduce(torch.ones(16), group=dp)
