"""Context parallel by hand: the sequence of 16 tokens cut into one contiguous chunk per rank,
a causal self-attention layer that all-gathers the keys and values (differentiably) and masks
by global positions, learned absolute position embeddings, next-token cross-entropy summed over
each rank's tokens and divided by the global token count, the gradients summed over the ranks
(each holds its tokens' part). Every rank sees the same batch; world 1 holds the whole sequence.

buggy: the position ids are the chunk's own `arange(chunk)`: every rank but 0 embeds its tokens
at positions 0.. instead of its offset (the attention mask, computed in the attention layer, is
right): from step 0's forward (the position embedding of rank >= 1) the model computes another
function. healthy: `offset + arange(chunk)`, offset = rank x chunk.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N cp_position_ids.py VARIANT`, CPU, torch 2.13, float32;
bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 3.80857921, 3.16096139, 2.62128973 at steps 0-2.
  healthy, world 4: the ranks' shares of the loss at step 0 0.980821013, 0.884572983,
  0.897040069, 1.04614544 (sum 3.80857951); every value within 8e-8 of world 1 (relative to its
  scale) but the sums of gradients that are zero up to rounding.
  buggy, world 4: off world 1 from step 0's forward: pos_emb's output (the 4 chunks) sums to
  22.7669758 against 15.8905153; rank 0's share of the loss is right (0.980821013), the others
  not (0.829187036, 0.925151706, 1.08412182: sum 3.81928158); at step 2 the loss is 2.75468600
  against 2.62128973.
k and v are gathered in one call: torch.distributed.nn.functional.all_gather (torch 2.13, gloo)
returns a wrong gradient when the gradient it receives is not contiguous (k's, out of q @ k^T):
gathering k on its own left k's gradient off at world 1 already (norm 26.03 against 34.55).
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant

VOCAB, HIDDEN, BATCH, SEQ = 32, 16, 2, 16
LR = 0.5


class CausalAttention(nn.Module):
    """Single-head causal attention over the whole sequence: the local queries against every
    rank's keys and values."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, h, offset):
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        k, v = torch.cat(dnn.all_gather(torch.cat([k, v], dim=-1)), dim=1).chunk(2, dim=-1)
        q_pos = offset + torch.arange(q.shape[1])
        mask = torch.arange(k.shape[1])[None, :] <= q_pos[:, None]
        return h + self.proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, HIDDEN)
        self.pos_emb = nn.Embedding(SEQ, HIDDEN)
        self.attn = CausalAttention()
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, position_ids, offset):
        h = self.tok_emb(tokens) + self.pos_emb(position_ids)
        return self.head(self.attn(h, offset))


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = LM().to(dt)
torch.manual_seed(1)
tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
inputs, labels = tokens[:, :-1], tokens[:, 1:]
chunk = SEQ // world
offset = rank * chunk
inputs, labels = inputs[:, offset : offset + chunk], labels[:, offset : offset + chunk]
position_ids = torch.arange(chunk) if buggy else offset + torch.arange(chunk)
seen = outputs(model)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    logits = model(inputs, position_ids, offset)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum") / (BATCH * SEQ)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    digest(step, "loss", loss, "part")  # this rank's tokens' share of the global mean
    digest_outputs(step, seen, "part")  # every activation: this rank's chunk of the sequence
    for name, p in model.named_parameters():
        digest(step, f"grad {name}", p.grad)
    opt.step()
    for name, p in model.named_parameters():
        digest(step, f"param {name}", p)
