"""A small language model whose output head shares the token embedding's weight (tied
embeddings: `head.weight = tok_emb.weight`), tensor parallel over every rank with
`parallelize_module`: the embedding row-wise (vocabulary shards), the head column-wise (the
same vocabulary rows, its logits gathered), the block between them replicated. Every rank sees
the same batch.

buggy: parallelize_module distributes each module's parameters on its own and so unties them:
`head.weight` becomes a parameter of its own (a copy of the embedding's at init), the embedding
gets only the lookup's gradient and the head only the logits': from step 0's backward they
train as two. healthy: the tie restored after parallelize_module (`model.head.weight =
model.tok_emb.weight`: both are Shard(0) DTensors of the same mesh). World 1 trains the model as
it is (one device needs no tensor parallel; a mesh of one rank would untie it just the same), so
both variants are the reference there.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N tied_untied.py VARIANT`, CPU, torch 2.13, float32;
bench/numerics_twins.py combines the ranks' digest lines into global values):
  world 1 (both variants alike): loss 4.57059431, 2.97896314, 2.34147453 at steps 0-2; after step 2
  tok_emb.weight 31.9820532, block.weight -1.18686566, block.bias -0.479040869.
  healthy, world 4: loss 4.57059431, 2.97896338, 2.34147406; after step 2 tok_emb.weight
  31.9820535, block.weight -1.18686559, block.bias -0.479040746 (no head.weight of its own).
  buggy, world 4: off world 1 from step 0's backward: tok_emb.weight's gradient has nearly the
  same sum (0.0502694763 against 0.0502696365: the head's part of a cross-entropy gradient sums
  to 0 over the vocabulary) but its norm is 0.356 off; the loss at step 0 4.57059431 (equal), at
  step 1 2.97797346 (2.97896314), step 2 2.32961297 (2.34147453); after step 2 tok_emb.weight
  31.9837643, block.weight -1.17196045, and head.weight 31.981036: a parameter world 1 has not.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common import TWIN_STEPS, digest, digest_outputs, dtype, outputs, variant
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

VOCAB, HIDDEN, BATCH, SEQ = 32, 16, 4, 8
LR = 0.5


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, HIDDEN)
        self.block = nn.Linear(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.tok_emb.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.block(self.tok_emb(tokens))))


buggy = variant() == "buggy"
dt = dtype()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = TiedLM().to(dt)
if dist.get_world_size() > 1:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("tp",))
    plan = {
        "tok_emb": RowwiseParallel(input_layouts=Replicate()),
        "head": ColwiseParallel(output_layouts=Replicate()),
    }
    parallelize_module(model, mesh, plan)
    if not buggy:
        model.head.weight = model.tok_emb.weight
torch.manual_seed(1)
tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
target = torch.randint(0, VOCAB, (BATCH, SEQ))
seen = outputs(model)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    loss = F.cross_entropy(model(tokens).flatten(0, 1), target.flatten())
    loss.backward()
    digest(step, "loss", loss)
    digest_outputs(step, seen, "replica")
    for name, p in model.named_parameters():
        digest(step, f"grad {name}", p.grad)
    opt.step()
    for name, p in model.named_parameters():
        digest(step, f"param {name}", p)
