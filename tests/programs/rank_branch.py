"""Rank 1 issues one extra all_reduce: it must show up on rank 1's stream only."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
x = torch.ones(4)
dist.all_reduce(x)
if dist.get_rank() == 1:
    dist.all_reduce(x)  # the rank-dependent extra collective
dist.all_reduce(x)
