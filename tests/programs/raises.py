"""Rank 2 raises after its first all_reduce; the other ranks finish."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
dist.all_reduce(torch.ones(2))
if dist.get_rank() == 2:
    raise ValueError("bad batch on rank 2")
dist.all_reduce(torch.ones(2))
