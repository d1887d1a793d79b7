"""Seeded argument error: an all_gather output list one tensor short of the group (on every rank
alike). Gloo raises at that line ("invalid output tensor list at index 0 (expected length 4, got
3)"); the dry run must too, in fake and in local mode."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
dist.all_reduce(torch.ones(4))
dist.all_gather([torch.empty(4) for _ in range(world - 1)], torch.ones(4))
dist.all_reduce(torch.ones(4))
