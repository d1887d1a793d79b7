"""Seeded bug: rank 5 creates the two halves' subgroups in the other order, so group names mean
different member lists on different ranks."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
halves = [[0, 1, 2, 3], [4, 5, 6, 7]]
if dist.get_rank() == 5:
    halves = halves[::-1]
groups = [dist.new_group(h) for h in halves]
mine = next(g for g, h in zip(groups, halves) if dist.get_rank() in h)
dist.all_reduce(torch.ones(4), group=mine)
dist.all_reduce(torch.ones(4))
