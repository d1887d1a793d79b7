"""Seeded bug: rank 3 reduces with MAX where the others use SUM."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
op = dist.ReduceOp.MAX if dist.get_rank() == 3 else dist.ReduceOp.SUM
dist.all_reduce(torch.ones(4), op=op)
dist.all_reduce(torch.ones(4))
