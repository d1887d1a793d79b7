"""Hand-written expert parallel with plain tensors: every rank holds its own expert (a Linear
seeded by its rank) next to the shared block, whose gradients are averaged over the world by
hand. The experts are meant to differ per rank and are never reduced; the shared parameters
stay replicas. Healthy: `analyzer numerics` must not take an expert for a replica that drifted."""

import torch
import torch.distributed as dist
import torch.nn as nn
from common import setup, train

model = setup()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(100 + rank)  # each rank its own expert
model.expert = nn.Linear(16, 16)
shared = [p for n, p in model.named_parameters() if not n.startswith("expert.")]
inner = model.w1


class WithExpert(nn.Module):
    def __init__(self, w1, expert):
        super().__init__()
        self.w1, self.expert = w1, expert

    def forward(self, h):
        return self.w1(h + self.expert(h))


model.w1 = WithExpert(inner, model.expert)


def average(model):
    for p in shared:
        dist.all_reduce(p.grad)
        p.grad.div_(world)


train(model, after_backward=average)
