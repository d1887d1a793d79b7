"""DDP with find_unused_parameters=True: the auxiliary head is used on odd steps only. 3 steps."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
        self.head = nn.Linear(512, 16)
        self.aux = nn.Linear(512, 4)

    def forward(self, x, use_aux: bool):
        h = self.trunk(x)
        out = self.head(h).square().mean()
        if use_aux:
            out = out + self.aux(h).square().mean()
        return out


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    model = DDP(Net(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(rank)
    for step in range(3):
        loss = model(torch.randn(8, 256), use_aux=step % 2 == 1)
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
