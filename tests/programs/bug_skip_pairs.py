"""Seeded bug: on a 2 x 2 (dp, tp) mesh of 4 ranks, rank 0 skips the second of three
all-reduces on each of its 2-rank groups. Each group alone is a tie (the streams of its two
members differ, neither is a majority); rank 0 is the member of both ties, so it is the one
that skipped, in both groups (not rank 1 or 2 "adding" one).

By hand: tp {0, 1}: rank 0 issues #0, #2 (sizes 8, 10), rank 1 issues sizes 8, 9, 10: the tie
names {0, 1}; dp {0, 2}: the same with sizes 16, 17, 18, naming {0, 2}. Groups {2, 3} and
{1, 3} agree. Rank 0 is named by both ties: it skipped all_reduce #1 on tp and on dp."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("nccl")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
for i in range(3):
    if not (dist.get_rank() == 0 and i == 1):
        dist.all_reduce(torch.ones(8 + i), group=tp)
        dist.all_reduce(torch.ones(16 + i), group=dp)
