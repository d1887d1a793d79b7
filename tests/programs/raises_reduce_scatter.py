"""Seeded argument error: a reduce_scatter_tensor whose input is not the output times the group
size (9 elements into 2 per rank of 4, on every rank alike). NCCL raises ValueError at that line
("input tensor must be the same size as output size times world size"); the dry run must too, in
fake and in local mode."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
world = dist.get_world_size()
dist.all_reduce(torch.ones(4))
dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world + 1))
dist.all_reduce(torch.ones(4))
