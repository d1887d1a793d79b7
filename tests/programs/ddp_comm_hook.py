"""DDP with the bf16 gradient compression comm hook, 3 steps."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 16))


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    model = DDP(mlp())
    model.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(rank)
    for _step in range(3):
        loss = model(torch.randn(8, 256)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
