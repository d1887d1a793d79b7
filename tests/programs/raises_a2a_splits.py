"""Seeded argument error: all_to_all_single's input_split_sizes sum to 9 rows of an 8-row input
(on every rank alike). NCCL and Gloo raise at that line (torch's checkSplitSizes: "Split sizes
doesn't match total dim 0 size"); the dry run must too, in fake and in local mode."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
world = dist.get_world_size()
dist.all_reduce(torch.ones(4))
dist.all_to_all_single(torch.empty(2 * world, 4), torch.ones(2 * world, 4), [2] * world, [3] + [2] * (world - 1))
dist.all_reduce(torch.ones(4))
