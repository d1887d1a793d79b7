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


# The twins of issue 37 (ddp_batchnorm.py, pipeline_*.py, ...) share the conventions below: the
# variant first, then `--dtype bf16` (model and data in bfloat16; float32 without it) and the
# program's own options; 3 optimizer steps; with NUMERICS_PRINT=1 every rank prints one `digest`
# line per value and step, which bench/numerics_twins.py combines into global values.
TWIN_STEPS = 3


def option(name: str, default: str) -> str:
    """The value after `--NAME` on the command line, or `default`."""
    args = sys.argv[2:]
    flag = f"--{name}"
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else default


def dtype() -> torch.dtype:
    """`--dtype bf16|fp32` (default fp32): what the twin's model and data are made of."""
    name = option("dtype", "fp32")
    if name not in ("fp32", "bf16"):
        raise SystemExit(f"{sys.argv[0]}: --dtype takes fp32 or bf16, not {name}")
    return torch.bfloat16 if name == "bf16" else torch.float32


def digest(step: int, what: str, t, layout: str = "replica") -> None:
    """Real runs only (NUMERICS_PRINT=1): `rank R step S WHAT: sum X sumsq Y numel N layout L`.

    layout says how the ranks' lines make the global value: `replica` (every rank that prints it
    holds all of it: a DTensor is printed whole), `part` (each rank holds a part: a batch or
    sequence shard, a vocab shard, a pipeline stage's parameter; the parts' sums add up), `mean`
    (each rank's loss over an equal share of the batch: the global one is their mean)."""
    if not os.environ.get("NUMERICS_PRINT"):
        return
    from torch.distributed.tensor import DTensor

    t = t.detach()
    full = (t.full_tensor() if isinstance(t, DTensor) else t).double()
    line = (
        f"rank {dist.get_rank()} step {step} {what}: sum {full.sum().item():.17g} "
        f"sumsq {full.pow(2).sum().item():.17g} numel {full.numel()} layout {layout}\n"
    )
    sys.stdout.write(line)  # one write: the ranks share torchrun's stdout, lines stay whole
    sys.stdout.flush()


def outputs(model) -> dict:
    """NUMERICS_PRINT=1 only (else empty and no hooks): every submodule's forward outputs since
    the caller last cleared the dict, detached, in a list per name (a pipeline stage runs once
    per microbatch: torch.cat of the list is the step's batch), for `digest`."""
    seen: dict = {}
    if os.environ.get("NUMERICS_PRINT"):
        for name, m in model.named_modules():
            if name:
                m.register_forward_hook(lambda _m, _i, out, name=name: seen.setdefault(name, []).append(out.detach()))
    return seen


def digest_outputs(
    step: int, seen: dict, layout: str = "part", layouts: dict | None = None, last: int | None = None
) -> None:
    """`digest` each module's outputs of this step (`outputs`' lists, concatenated; only the
    `last` ones if given), then forget them; `layouts` names the modules whose output is laid
    out otherwise than `layout`."""
    for name, chunks in seen.items():
        digest(step, f"output {name}", torch.cat(chunks[-last:] if last else chunks), (layouts or {}).get(name, layout))
    seen.clear()


def digest_step(step: int, loss, seen: dict, model) -> None:
    """One training step's lines after its backward: the loss (DDP's average of the ranks' losses
    is the one it trains), the module outputs (batch parts), every gradient."""
    digest(step, "loss", loss, "mean")
    digest_outputs(step, seen, "part")
    for name, p in model.named_parameters():
        digest(step, f"grad {name}", p.grad)
