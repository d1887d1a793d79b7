"""Megatron-style vocab-parallel cross-entropy, hand-written in plain torch: the output layer is
column-parallel over the vocabulary (rank r holds rows [r V/W, (r+1) V/W) of the head's weight,
cut from the whole weight drawn from seed 0 on every rank), its input copied to the tensor-
parallel region (identity forward, all-reduce of the gradient backward), and the loss computed
from the vocab shards of the logits without gathering them (Megatron's
_VocabParallelCrossEntropy: the max, the target logit and the sum of exponentials all-reduced).
Every rank sees the same batch (tensor parallel only); world 1 holds the whole vocabulary.

buggy: the row maxima are not all-reduced (MAX): every rank shifts its shard by its own
maximum, so the sum of exponentials adds terms of different shifts and the target logit is
shifted by its own shard's maximum: the loss and its gradient are wrong from step 0's forward.
healthy: all_reduce(MAX) of the row maxima first.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N vocab_parallel_ce.py VARIANT`, CPU, torch 2.13, float32;
bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 3.44095635, 3.3287158, 3.22080517 at steps 0-2; after step 2
  emb.weight 31.9546813, hidden.weight 0.107908949, head.weight -2.90278879.
  healthy, world 4: the same loss on every rank, 3.44095635, 3.3287158, 3.22080517; after step 2
  emb.weight 31.9546812, hidden.weight 0.107909035, head.weight (its 4 shards) -2.90278885.
  buggy, world 4: off world 1 from step 0's forward (ce's per-token loss sum 110.564931 against
  110.110605): loss 3.45515394, 3.35789251, 3.27139783 on every rank; after step 2 hidden.weight
  0.112713915, hidden.bias 0.0841341242 (0.0861859806). In bfloat16 (--dtype bf16) the loss is
  3.453125 against 3.4375 at step 0 (rel 4.5e-3) and no digest leaves world 1 by more than 3e-2.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant

VOCAB, HIDDEN, BATCH, SEQ = 32, 16, 4, 8
LR = 0.5


class _CopyToTensorParallel(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the ranks (each holds a vocab shard)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, vocab_start, sync_max):
        logits_max = logits.max(dim=-1)[0]
        if sync_max:
            dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
        logits = logits - logits_max.unsqueeze(-1)
        outside = (target < vocab_start) | (target >= vocab_start + logits.shape[-1])
        local_target = (target - vocab_start).masked_fill(outside, 0)
        predicted = logits.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(predicted)
        exp = logits.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp)
        softmax = exp / sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, outside, local_target)
        return sum_exp.log() - predicted

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, outside, local_target = ctx.saved_tensors
        grad = softmax.clone()
        grad.scatter_add_(-1, local_target.unsqueeze(-1), (outside.to(grad.dtype) - 1).unsqueeze(-1))
        return grad * grad_loss.unsqueeze(-1), None, None, None


class ColumnParallelHead(nn.Module):
    def __init__(self, full_weight, rank, world):
        super().__init__()
        per = VOCAB // world
        self.vocab_start = rank * per
        self.weight = nn.Parameter(full_weight[rank * per : (rank + 1) * per].clone())

    def forward(self, h):
        return _CopyToTensorParallel.apply(h) @ self.weight.t()


class VocabParallelCrossEntropy(nn.Module):
    def __init__(self, vocab_start, sync_max):
        super().__init__()
        self.vocab_start, self.sync_max = vocab_start, sync_max

    def forward(self, logits, target):
        return _VocabParallelCrossEntropy.apply(logits, target, self.vocab_start, self.sync_max)


class LM(nn.Module):
    def __init__(self, rank, world, sync_max):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.hidden = nn.Linear(HIDDEN, HIDDEN)
        head = nn.Linear(HIDDEN, VOCAB, bias=False)  # drawn whole on every rank, then cut
        self.head = ColumnParallelHead(head.weight.detach(), rank, world)
        self.ce = VocabParallelCrossEntropy(self.head.vocab_start, sync_max)

    def forward(self, tokens, target):
        h = torch.tanh(self.hidden(self.emb(tokens)))
        return self.ce(self.head(h), target).mean()


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = LM(rank, world, sync_max=not buggy).to(dt)
torch.manual_seed(1)
tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
target = torch.randint(0, VOCAB, (BATCH, SEQ))
seen = outputs(model)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    loss = model(tokens, target)
    loss.backward()
    digest(step, "loss", loss)
    digest_outputs(step, seen, "replica", {"head": "part"})  # the logits: each rank its vocab shard
    for name, p in model.named_parameters():
        digest(step, f"grad {name}", p.grad, "part" if name == "head.weight" else "replica")
    opt.step()
    for name, p in model.named_parameters():
        digest(step, f"param {name}", p, "part" if name == "head.weight" else "replica")
