"""Seeded bug: on a 2 x 2 (dp, tp) mesh of 4 ranks, rank 3 is the only rank of the world that
all-reduces in bfloat16, on both of its 2-rank groups. Each group alone is a tie (one float32,
one bfloat16 member); across groups rank 3 is the member of both ties, so it is the culprit.

By hand: tp groups {0, 1} (both float32: fine) and {2, 3} (tie); dp groups {0, 2} (fine) and
{1, 3} (tie). The ties name {2, 3} and {1, 3}: rank 3 is named by both, ranks 1 and 2 by one
each (and each agrees with rank 0 in its other group)."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
dtype = torch.bfloat16 if dist.get_rank() == 3 else torch.float32
dist.all_reduce(torch.ones(4))
dist.all_reduce(torch.ones(8, dtype=dtype), group=tp)
dist.all_reduce(torch.ones(16, dtype=dtype), group=dp)
dist.all_reduce(torch.ones(4))
