"""Seeded bug: rank 3 waits for a message from rank 2 that rank 2 never sends."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
if rank == 0:
    dist.send(torch.ones(4), dst=1)
elif rank == 1:
    dist.recv(torch.empty(4), src=0)
elif rank == 3:
    dist.recv(torch.empty(4), src=2)
dist.barrier()
