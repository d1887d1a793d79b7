"""dist.reduce: fake mode only (LocalTensorMode has no reduce)."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
dist.reduce(torch.ones(3), dst=2, op=dist.ReduceOp.SUM)
