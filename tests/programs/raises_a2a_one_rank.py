"""Seeded argument error on one rank: all_to_all_single splits written SPMD through the mesh's local
rank (a value per simulated rank under LocalTensorMode), where rank 2's input splits ask for one
row more than its 4-row input holds. Only rank 2 raises, at that line: in fake mode the others go
on, in local mode they stop with it (one process runs them all). For a world of 4."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
r = mesh.get_local_rank()
extra = (r // 2) * (3 - r)  # 1 on rank 2, else 0 (arithmetic: local mode cannot compare a per-rank value)
splits = [1 + extra] + [1] * (world - 1)
out = funcol.all_to_all_single(torch.ones(world, 4), [1] * world, splits, mesh.get_group())
dist.all_reduce(torch.ones(4))
