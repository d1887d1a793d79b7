"""Seeded argument error: a broadcast from root `world`, one past the last rank (on every rank
alike). Gloo raises at that line ("invalid root rank: 4"); the dry run must too, in fake and in
local mode."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
dist.all_reduce(torch.ones(4))
dist.broadcast(torch.ones(4), src=world)
dist.all_reduce(torch.ones(4))
