"""Rank 0 reduces a logging metric every other step (an extra all_reduce inside
`if rank == 0 and step % 2 == 0`): check and hang must both name that op, culprit rank 0."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
x = torch.ones(4)
for step in range(4):
    dist.all_reduce(x)
    if rank == 0 and step % 2 == 0:
        dist.all_reduce(x)  # logging: a metric reduced on rank 0 only
    dist.all_reduce(x)
