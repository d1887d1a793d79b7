"""Seeded deadlock: two groups over the same ranks, entered A then B on rank 0, B then A on 1."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
a = dist.new_group([0, 1], group_desc="A")
b = dist.new_group([0, 1], group_desc="B")
for g in ((a, b) if dist.get_rank() == 0 else (b, a)):
    dist.all_reduce(torch.ones(4), group=g)
