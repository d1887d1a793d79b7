"""Rank 1 dies of a segmentation fault (a crash in native code) after its first all_reduce."""
import ctypes

import torch
import torch.distributed as dist


def crash():
    ctypes.string_at(0)  # reads address 0


dist.init_process_group("nccl")
dist.all_reduce(torch.ones(2))
if dist.get_rank() == 1:
    crash()
dist.all_reduce(torch.ones(2))
