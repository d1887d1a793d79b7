"""Seeded bug: the last rank's shard is one element short in an all-gather (each rank's own arguments valid)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
dist.all_reduce(torch.ones(4))
shard = torch.ones(4 if rank < world - 1 else 3)
dist.all_gather_into_tensor(torch.empty(shard.numel() * world), shard)  # sized from its own shard
dist.all_reduce(torch.ones(4))
