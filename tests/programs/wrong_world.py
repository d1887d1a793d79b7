"""Asks for 8 ranks explicitly."""
import torch.distributed as dist

dist.init_process_group("nccl", world_size=8, rank=0)
