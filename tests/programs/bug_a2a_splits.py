"""Seeded bug: every rank sends one row to every rank, but rank 2 expects two from each."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
world = dist.get_world_size()
expect = [2] * world if dist.get_rank() == 2 else [1] * world
dist.all_to_all_single(torch.empty(sum(expect), 4), torch.ones(world, 4),
                       output_split_sizes=expect, input_split_sizes=[1] * world)
