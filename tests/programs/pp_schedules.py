"""torch.distributed.pipelining as its tutorial writes it: a stack of Linear layers cut into
stages, a stock PipelineStage per stage, one of the stock schedules, 2 training steps.

usage: pp_schedules.py [--schedule GPipe|1F1B|Interleaved1F1B|InterleavedZeroBubble|LoopedBFS]
                   [--input-args] [--microbatches M]
Looped schedules (Interleaved*, LoopedBFS) put 2 stages on every rank: r and r + world.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                          ScheduleInterleavedZeroBubble, ScheduleLoopedBFS)

SCHEDULES = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B, "Interleaved1F1B": ScheduleInterleaved1F1B,
             "InterleavedZeroBubble": ScheduleInterleavedZeroBubble, "LoopedBFS": ScheduleLoopedBFS}
LOOPED = ("Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS")
DIM, BATCH = 16, 8

parser = argparse.ArgumentParser()
parser.add_argument("--schedule", default="1F1B", choices=sorted(SCHEDULES))
parser.add_argument("--input-args", action="store_true", help="give every stage its input/output shapes")
parser.add_argument("--microbatches", type=int, default=4)
args = parser.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
per_rank = 2 if args.schedule in LOOPED else 1
n_stages = world * per_rank
mb = BATCH // args.microbatches


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(DIM, DIM)

    def forward(self, x):
        return torch.relu(self.lin(x))


stages = []
for i in range(per_rank):
    index = rank + i * world
    torch.manual_seed(index)
    kw = {}
    if args.input_args:
        # the activations between stages carry gradients (the first stage's input does not)
        kw = dict(input_args=torch.empty(mb, DIM, requires_grad=index > 0),
                  output_args=torch.empty(mb, DIM, requires_grad=True))
    stages.append(PipelineStage(Block(), index, n_stages, torch.device("cpu"), **kw))

loss_fn = nn.MSELoss()
cls = SCHEDULES[args.schedule]
schedule = cls(stages if per_rank > 1 else stages[0], n_microbatches=args.microbatches, loss_fn=loss_fn)
opt = torch.optim.SGD([p for s in stages for p in s.submod.parameters()], lr=0.1)
for step in range(2):
    torch.manual_seed(100 + step)
    x, y = torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)
    ids = [s.stage_index for s in stages]
    losses = []
    if 0 in ids:
        schedule.step(x, target=y, losses=losses)
    elif n_stages - 1 in ids:
        schedule.step(target=y, losses=losses)
    else:
        schedule.step()
    opt.step()
    opt.zero_grad()
    if n_stages - 1 in ids:
        print(f"step {step} loss {sum(float(x) for x in losses) / len(losses):.4f}")
dist.destroy_process_group()
