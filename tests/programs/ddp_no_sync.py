"""DDP with gradient accumulation: 2 micro-batches per step, the first under no_sync();
bucket_cap_mb=1. 3 steps.
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUMULATE = 2


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 16))


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    model = DDP(mlp(), bucket_cap_mb=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(rank)
    for _step in range(3):
        for micro in range(ACCUMULATE):
            x = torch.randn(8, 256)
            if micro < ACCUMULATE - 1:
                with model.no_sync():
                    (model(x).square().mean() / ACCUMULATE).backward()
            else:
                (model(x).square().mean() / ACCUMULATE).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
