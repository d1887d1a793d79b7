"""The model and training loop both pipeline twins share (torch.distributed.pipelining).

An MLP: inp (8 -> 16), N_LAYERS residual-free tanh layers of 16, out (16 -> 4), MSE against a
fixed target, SGD. Every rank builds the whole model from seed 0 and keeps its stage's part
(the manual split of torch's pipelining tutorial and TorchTitan: the other layers deleted, inp /
out set to None off the first / last stage), so a parameter keeps its whole-model name. The
global batch of 8 goes through the schedule in 4 microbatches.

World 1 is the reference: one device needs no pipeline, so it trains the whole model on the
whole batch directly (forward, the mean loss, backward, step), which is what the pipeline must
compute.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, option, outputs
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

N_LAYERS = 5
BATCH = 8
MICROBATCHES = 4
LR = 0.1
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.layers = nn.ModuleDict({str(i): nn.Linear(16, 16) for i in range(N_LAYERS)})
        self.out = nn.Linear(16, 4)

    def forward(self, h):
        if self.inp is not None:
            h = self.inp(h)
        for layer in self.layers.values():
            h = torch.tanh(layer(h))
        return self.out(h) if self.out is not None else h


def even_split(stage: int, stages: int) -> range:
    """The layers of `stage`: N_LAYERS over the stages, the first ones taking one more."""
    per, extra = divmod(N_LAYERS, stages)
    start = stage * per + min(stage, extra)
    return range(start, start + per + (stage < extra))


def keep_stage(net: Net, layers: range, stage: int, stages: int) -> Net:
    for i in list(net.layers):
        if int(i) not in layers:
            del net.layers[i]
    if stage != 0:
        net.inp = None
    if stage != stages - 1:
        net.out = None
    return net


def train(*, split=even_split, scale_grads: bool = True) -> None:
    """3 steps of the pipeline at the world size (world 1: the whole model, no pipeline)."""
    dt = dtype()
    schedule_cls = SCHEDULES[option("schedule", "gpipe")]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = Net().to(dt)
    torch.manual_seed(1)
    x = torch.randn(BATCH, 8, dtype=dt)
    y = torch.randn(BATCH, 4, dtype=dt)
    if world > 1:
        net = keep_stage(net, split(rank, world), rank, world)
        stage = PipelineStage(net, rank, world, torch.device("cpu"))
        schedule = schedule_cls(stage, n_microbatches=MICROBATCHES, loss_fn=F.mse_loss, scale_grads=scale_grads)
    seen = outputs(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    last = rank == world - 1
    for step in range(TWIN_STEPS):
        opt.zero_grad()
        if world == 1:
            loss = F.mse_loss(net(x), y)
            loss.backward()
        else:
            losses: list = []
            if rank == 0:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            loss = torch.stack(losses).mean() if last else None  # equal microbatches: the batch's mean
        if loss is not None:
            digest(step, "loss", loss)
        # at its first step a stage runs its forward once more, on uninitialised buffers (the
        # schedule's metadata inference, torch 2.13): the step's outputs are the last microbatches'
        digest_outputs(step, seen, last=MICROBATCHES if world > 1 else None)
        for name, p in net.named_parameters():
            digest(step, f"grad {name}", p.grad, "part")  # a stage's parameter lives on that rank alone
        opt.step()
        for name, p in net.named_parameters():
            digest(step, f"param {name}", p, "part")
