"""Seeded for `analyzer lint`: every gradient all-reduced on its own, from a hook in backward.

Plain data parallel by hand on the world group (no DDP, no FSDP): a model whose `blocks` are 6
Linear(16, 16) layers (12 parameters: weight 1 KiB, bias 64 B in float32). Each parameter's
post-accumulate-grad hook all-reduces its gradient, synchronously: per step 12 all_reduce
(float32, sum) on the world group during backward, under blocks.0 .. blocks.5. 2 steps.
`--async`: the hooks pass async_op=True and the step waits on every Work after backward (the
calls are still unbucketed, but no longer block backward).
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

ASYNC = "--async" in sys.argv


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(6))

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


dist.init_process_group("gloo")
torch.manual_seed(0)
model = Net()
works = []


def reduce_grad(p):
    work = dist.all_reduce(p.grad, async_op=ASYNC)
    if ASYNC:
        works.append(work)


for p in model.parameters():
    p.register_post_accumulate_grad_hook(reduce_grad)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    model(torch.randn(4, 16)).sum().backward()
    for work in works:
        work.wait()
    works.clear()
    opt.step()
    opt.zero_grad()
