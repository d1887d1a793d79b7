"""Seeded bug: rank 0 sends 4 elements to rank 1, which receives 5."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
if rank == 0:
    dist.send(torch.ones(4), dst=1)
elif rank == 1:
    dist.recv(torch.empty(5), src=0)
dist.barrier()
