"""Two all_reduces, then rank 2 stops in its own work (a dead dataloader, a stuck kernel) and
never enters the third; on a real backend the other ranks wait in it until --timeout."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
for _ in range(2):
    dist.all_reduce(torch.ones(2))
if dist.get_rank() == 2:
    time.sleep(600)
dist.all_reduce(torch.ones(2))
