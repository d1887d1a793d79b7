"""The small model and training loop every numerics corpus program shares.

A residual MLP block on a sequence: x (B, S, 8) -> emb -> h; h + w2(relu(w1(norm(h)))) -> out,
MSE against a fixed target, SGD, STEPS steps. Every rank draws the same batch (seed 0), so the
world-1 run is the reference: a correct parallel layout computes the same values.

Run for real: `torchrun --nproc-per-node 4 PROGRAM.py buggy` (gloo, CPU) prints, with
NUMERICS_PRINT=1, each rank's loss per step and a digest of every parameter at the end; the
corpus tests' docstrings quote those figures.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

STEPS = 2
LR = 0.5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(8, 16, bias=False)
        self.norm = nn.LayerNorm(16)
        self.w1 = nn.Linear(16, 32)
        self.w2 = nn.Linear(32, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        h = self.emb(x)
        h = h + self.w2(F.relu(self.w1(self.norm(h))))
        return self.out(h)


def variant() -> str:
    """`healthy` or `buggy`: the program's first argument."""
    v = sys.argv[1] if len(sys.argv) > 1 else "buggy"
    if v not in ("healthy", "buggy"):
        raise SystemExit(f"usage: {sys.argv[0]} healthy|buggy")
    return v


def setup():
    """Process group (gloo) and the model, seeded the same on every rank."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = Block()
    with torch.no_grad():  # LayerNorm starts at 1 / 0: make its weight learn visibly
        model.norm.weight.copy_(torch.linspace(0.5, 1.5, 16))
    return model


def batch():
    """The same batch on every rank (the world-1 reference sees the same)."""
    torch.manual_seed(1)  # the global generator: local mode gives every simulated rank its draws
    x = torch.randn(2, 8, 8)
    y = torch.randn(2, 8, 4)
    return x, y


def train(model, after_backward=None, params=None):
    """STEPS steps of SGD; `after_backward(model)` runs between backward and the step (the
    programs' own gradient handling)."""
    opt = torch.optim.SGD(params if params is not None else model.parameters(), lr=LR)
    x, y = batch()
    for step in range(STEPS):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        if after_backward is not None:
            after_backward(model)
        opt.step()
        report(f"step {step} loss", loss)
    for name, p in model.named_parameters():
        report(f"param {name}", p)


def report(what: str, t) -> None:
    """Real runs only (NUMERICS_PRINT=1): this rank's value, and the full value of a DTensor."""
    if not os.environ.get("NUMERICS_PRINT"):
        return
    from torch.distributed.tensor import DTensor

    t = t.detach()
    full = t.full_tensor() if isinstance(t, DTensor) else t
    local = t.to_local() if isinstance(t, DTensor) else t
    print(
        f"rank {dist.get_rank()} {what}: sum {full.double().sum().item():.9g} "
        f"sumsq {full.double().pow(2).sum().item():.9g} local_sum {local.double().sum().item():.9g}",
        flush=True,
    )
