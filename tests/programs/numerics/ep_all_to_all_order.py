"""Hand-written expert parallel (top-1 MoE) over every rank: 8 experts, 8/W on each rank (world
4: 2, world 1: all 8), 32 tokens split evenly over the ranks (data parallel over tokens), a
replicated gate and input layer whose gradients are summed over the ranks, each rank's loss its
tokens' squared error over the global count. Dispatch as Megatron's: the tokens sorted by
expert, the per-expert counts exchanged (all_to_all_single), the tokens sent (a differentiable
all_to_all_single), the experts run, the results sent back the same way.

The receive buffer is source-major: from source rank 0 its tokens for local expert 0, then for
local expert 1, then source rank 1's, ... healthy: the receiver regroups it by expert (each
expert its rows from every source) and back. buggy: the receiver reads the buffer as if it
were expert-major (the first `sum over sources` rows for local expert 0, ...): wherever a rank
holds more than one expert, rows go through another expert's weights, from step 0's forward;
the results still return to their own tokens, and every rank issues the same collectives with
the same sizes. At world 1 (one source) both orders are the same: the bug does nothing.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N ep_all_to_all_order.py VARIANT`, CPU,
torch 2.13, float32; bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 1.41260588, 1.34288347, 1.27828014 at steps 0-2; after step
  2 inp.weight -2.44152839, moe.gate.weight 2.00704252, moe.experts.0.weight -0.963544426,
  moe.experts.6.weight 0.132819487.
  healthy, world 4: the ranks' shares of the loss at step 0 0.343631297, 0.316822261,
  0.377411425, 0.374740899 (sum 1.41260588); after step 2 inp.weight -2.44152841,
  moe.experts.0.weight -0.963544431, moe.experts.6.weight 0.132819487: every value within 5e-8
  of world 1 (relative to its scale).
  buggy, world 4: off world 1 from step 0's forward: the experts' outputs (moe.experts.6's sum
  5.11061398 against 5.78285714), the loss shares 0.344148099, 0.321297526, 0.378691494,
  0.378154576 (sum 1.42229170); at step 2 1.28775242 against 1.27828014; after step 2
  moe.experts.0.weight -1.04442284, moe.experts.6.weight 0.136139361 (expert 2 ends where world 1
  leaves it, -5.31361082).
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant

EXPERTS, HIDDEN, TOKENS = 8, 16, 32
LR = 0.5


class MoE(nn.Module):
    def __init__(self, rank, world, buggy):
        super().__init__()
        self.world, self.buggy = world, buggy
        self.local = EXPERTS // world
        self.first = rank * self.local
        self.gate = nn.Linear(HIDDEN, EXPERTS, bias=False)
        every = {str(e): nn.Linear(HIDDEN, HIDDEN) for e in range(EXPERTS)}  # the same draws everywhere
        self.experts = nn.ModuleDict({str(e): every[str(e)] for e in range(self.first, self.first + self.local)})

    def forward(self, h):
        probs = F.softmax(self.gate(h), dim=-1)
        prob, choice = probs.max(dim=-1)
        order = torch.argsort(choice, stable=True)
        per_expert = torch.bincount(choice, minlength=EXPERTS)
        recv_counts = torch.empty_like(per_expert)
        dist.all_to_all_single(recv_counts, per_expert)  # [source][local expert]
        recv_counts = recv_counts.view(self.world, self.local)
        send_splits = per_expert.view(self.world, self.local).sum(1).tolist()
        recv_splits = recv_counts.sum(1).tolist()
        buf = h.new_empty(sum(recv_splits), HIDDEN)
        buf = dnn.all_to_all_single(buf, h[order], recv_splits, send_splits)
        out = self.run_experts(buf, recv_counts)
        back = h.new_empty(h.shape[0], HIDDEN)
        back = dnn.all_to_all_single(back, out, send_splits, recv_splits)
        result = torch.empty_like(back).index_copy(0, order, back)
        return h + prob.unsqueeze(-1) * result

    def run_experts(self, buf, recv_counts):
        if self.buggy:  # reads the buffer as expert-major
            chunks = buf.split(recv_counts.sum(0).tolist())
            return torch.cat([self.experts[str(self.first + j)](c) for j, c in enumerate(chunks)])
        chunks = buf.split(recv_counts.flatten().tolist())  # source-major
        by_expert = [torch.cat([chunks[s * self.local + j] for s in range(self.world)]) for j in range(self.local)]
        done = [self.experts[str(self.first + j)](c).split(recv_counts[:, j].tolist()) for j, c in enumerate(by_expert)]
        return torch.cat([done[j][s] for s in range(self.world) for j in range(self.local)])


class Net(nn.Module):
    def __init__(self, rank, world, buggy):
        super().__init__()
        self.inp = nn.Linear(HIDDEN, HIDDEN)
        self.moe = MoE(rank, world, buggy)

    def forward(self, x):
        return self.moe(torch.tanh(self.inp(x)))


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = Net(rank, world, buggy).to(dt)
torch.manual_seed(1)
x = torch.randn(TOKENS, HIDDEN, dtype=dt)
y = torch.randn(TOKENS, HIDDEN, dtype=dt)
per = TOKENS // world
x, y = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
shared = [p for n, p in model.named_parameters() if not n.startswith("moe.experts.")]
seen = outputs(model)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).sum() / (TOKENS * HIDDEN)
    loss.backward()
    for p in shared:  # the experts' gradients came back through the all_to_all already
        dist.all_reduce(p.grad)
    digest(step, "loss", loss, "part")
    digest_outputs(step, seen, "part")
    for name, p in model.named_parameters():
        digest(step, f"grad {name}", p.grad, "part" if name.startswith("moe.experts.") else "replica")
    opt.step()
    for name, p in model.named_parameters():
        digest(step, f"param {name}", p, "part" if name.startswith("moe.experts.") else "replica")
