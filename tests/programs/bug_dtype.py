"""Seeded bug: rank 2 all-reduces in float64."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
dist.all_reduce(torch.ones(4))
dist.all_reduce(torch.ones(8, dtype=torch.float64 if dist.get_rank() == 2 else torch.float32))
dist.all_reduce(torch.ones(4))
