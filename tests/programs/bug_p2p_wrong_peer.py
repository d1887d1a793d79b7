"""Seeded bug: a 4-stage forward chain 0 -> 1 -> 2 -> 3 where rank 2 sends to the wrong peer
(rank 0, a wrapped `(rank + 2) % world`): rank 3 waits in its recv from 2, rank 2 in a send
nobody receives."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
act = torch.ones(4)
if rank > 0:
    dist.recv(act, src=rank - 1)
if rank < world - 1:
    dist.send(act, dst=(rank + 2) % world if rank == 2 else rank + 1)
dist.barrier()
