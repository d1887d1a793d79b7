"""DDP over every rank on a language-model batch with padding: 8 sequences of 12 tokens, each
padded after its own length (labels -100), so the ranks' shares of 8/W sequences hold different
numbers of real tokens (world 4: 22, 10, 16 and 20 of 68).

buggy: each rank's loss is the mean over its own tokens (F.cross_entropy's default) and DDP
averages the gradients: a rank's every token weighs 1 / (W x its own count) instead of
1 / (the global count): the gradients are not the whole batch's from step 0's backward (the
loss the ranks report averages to another number at step 0 already). healthy: each rank sums
its tokens' losses and divides by the global token count (all-reduced), times W for DDP's
average (what TorchTitan and HF Trainer's num_items_in_batch do). World 1: the whole batch's
mean over its 68 tokens (both variants).

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N ddp_uneven_padding.py VARIANT`, CPU, torch 2.13, float32;
bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 3.45988965, 3.41000032, 3.36259866 at steps 0-2; after
  step 2 emb.weight 32.0120523, mlp.weight 0.0750751845, mlp.bias -0.218817985.
  healthy, world 4: the ranks' losses (W x their token sums over the global count) 4.55366516,
  2.05499697, 3.23257756, 3.99831891 at step 0 (mean 3.45988965); after step 2 emb.weight
  32.0120522, mlp.weight 0.0750752208, mlp.bias -0.21881799.
  buggy, world 4: off world 1 at step 0 already in the loss: the ranks' own means 3.51874137,
  3.49349475, 3.4346137, 3.39857101 average to 3.46135521 (rel 4.2e-4), and the gradients
  follow; at step 2 3.35394091 against 3.36259866; after step 2 mlp.weight 0.125500611
  (0.0750751845), mlp.bias -0.243532. In bfloat16 the loss's difference is below 3e-2; the
  first value off by more is emb.weight's gradient at step 0 (norm 0.032 off).
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB, HIDDEN, GLOBAL_BATCH, SEQ = 32, 16, 8, 12
LENGTHS = [12, 10, 3, 7, 12, 4, 9, 11]  # real tokens per sequence; the rest is padding
LR = 0.5


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, HIDDEN)
        self.mlp = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        return self.head(torch.tanh(self.mlp(self.emb(tokens))))


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
net = LM().to(dt)
model = DDP(net)
torch.manual_seed(1)
tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ))
labels = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ))
labels[torch.arange(SEQ)[None, :] >= torch.tensor(LENGTHS)[:, None]] = -100
per = GLOBAL_BATCH // world
tokens, labels = tokens[rank * per : (rank + 1) * per], labels[rank * per : (rank + 1) * per]
seen = outputs(net)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    logits = model(tokens).flatten(0, 1)
    if buggy:
        loss = F.cross_entropy(logits, labels.flatten())
    else:
        n_tokens = (labels != -100).sum()
        dist.all_reduce(n_tokens)
        loss = F.cross_entropy(logits, labels.flatten(), reduction="sum") / n_tokens * world
    loss.backward()
    digest(step, "loss", loss, "mean")  # DDP's average of the ranks' losses is the one it trains
    digest_outputs(step, seen, "part")
    for name, p in net.named_parameters():
        digest(step, f"grad {name}", p.grad)
    opt.step()
    for name, p in net.named_parameters():
        digest(step, f"param {name}", p)
