"""The same FSDP-like exchange on a 2 x 2 mesh whose shard dim is named DIM; with --size-one,
TorchTitan-style size-1 dims (pp, tp) are created too and a size-1 all_reduce is issued on tp.

Usage: mesh_names.py DIM [--size-one]   (--world-size 4)
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

dim = sys.argv[1]
size_one = "--size-one" in sys.argv
dist.init_process_group("nccl")
if size_one:
    mesh = init_device_mesh("cpu", (1, 2, 2, 1), mesh_dim_names=("pp", "dp_replicate", dim, "tp"))
else:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", dim))
shard = mesh.get_group(dim)
for step in range(2):
    full = funcol.all_gather_tensor(torch.ones(8), 0, shard).wait()
    if size_one:
        funcol.all_reduce(torch.ones(1), "sum", mesh.get_group("tp")).wait()
    funcol.reduce_scatter_tensor(full, "sum", 0, shard).wait()
