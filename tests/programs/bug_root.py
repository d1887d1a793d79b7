"""Seeded bug: rank 1 broadcasts from itself while the others expect rank 0."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
dist.broadcast(torch.ones(4), src=1 if dist.get_rank() == 1 else 0)
dist.all_reduce(torch.ones(4))
