"""A 2-D (dp x tp) job of 3 steps; with --stop R, rank R dies (os._exit) before step 1's dp
all-gather, the way a rank is lost to a crash or OOM at scale."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

stop = int(sys.argv[sys.argv.index("--stop") + 1]) if "--stop" in sys.argv else -1
dist.init_process_group("nccl")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world // 8, 8), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
for step in range(3):
    dist.all_reduce(torch.ones(16), group=tp)
    if step == 1 and dist.get_rank() == stop:
        os._exit(1)
    dist.all_gather_into_tensor(torch.empty(4 * (world // 8)), torch.ones(4), group=dp)
    dist.all_reduce(torch.ones(16), group=tp)
