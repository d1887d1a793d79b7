"""Branches on a tensor value (.item()), as a logging or loss-scaling line does: fake compute
cannot know it, so `--compute fake` re-records every rank with real compute."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(x)
if x.sum().item() > 0:
    dist.all_reduce(x)
