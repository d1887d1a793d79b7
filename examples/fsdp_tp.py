"""A 2-D FSDP2 x tensor-parallel training script, the kind you would launch with torchrun.

    tracer record --script examples/fsdp_tp.py --world-size 4          # a process per rank
    tracer record --script examples/fsdp_tp.py --world-size 8 --mode local

It calls init_process_group("nccl") like the real job; the recorder serves it with its fake
backend, so this runs on a laptop and records what every rank would communicate.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return x + self.w2(torch.relu(self.w1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    world = int(os.environ["WORLD_SIZE"])
    tp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.dim) for _ in range(args.layers)])
    for block in model:
        parallelize_module(block, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        loss = model(torch.randn(args.batch, args.dim)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
