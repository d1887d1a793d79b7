"""Rank 0 logs a metric with an extra all_reduce the other ranks never issue (torchrun style):
a real run hangs there. Fake mode: a missing_collective on the world group, culprit rank 0.
Local mode: refused, naming the $RANK read."""
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("nccl")
loss = torch.ones(1)
dist.all_reduce(loss)
if rank == 0:
    metric = torch.ones(3)
    dist.all_reduce(metric)  # rank 0 only
dist.all_reduce(torch.ones(2))
dist.barrier()
