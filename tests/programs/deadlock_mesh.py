"""Seeded deadlock: on a 2 x 2 (dp, tp) mesh, ranks enter their two groups in orders that form
one wait cycle 0 -> 1 -> 3 -> 2 -> 0 through all four groups (each call alone is matched)."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
order = {0: (tp, dp), 1: (dp, tp), 2: (dp, tp), 3: (tp, dp)}[dist.get_rank()]
for g in order:
    dist.all_reduce(torch.ones(4), group=g)
