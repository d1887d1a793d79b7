"""HF transformers (a tiny LlamaForCausalLM) under torch DDP, as a hand-written loop around a
Hub model is written, on a language-model batch with padding: 8 sequences of 12 tokens, each
padded after its own length (labels -100), so the ranks' shares of 8/W sequences hold different
numbers of real tokens.

buggy: the loss is `model(..., labels=labels).loss`, transformers' default: the mean over the
rank's own (shifted) tokens; DDP averages the gradients, so a rank's every token weighs
1 / (W x its own count) instead of 1 / (the global count), and the model leaves world 1 at
step 0's loss already. healthy: `num_items_in_batch` = the global token count (all-reduced),
what HF Trainer passes, times W for DDP's average. World 1: the whole batch's mean (both alike).

Real gloo (`tracer record --mode real --numerics`, CPU, torch 2.13, transformers 5.17, float32):
  world 1 (both variants alike): loss 3.4675357, 3.2655606, 3.0766442 at steps 0-2;
  embed_tokens.weight's sum after step 2 -0.29971448.
  healthy, world 4: the ranks' losses average to 3.467536, 3.2655607, 3.0766442;
  embed_tokens.weight -0.29971442.
  buggy, world 4: off world 1 at step 0's loss already, 3.4745329 (rel 2.0e-3), then 3.2579135,
  3.0460839; embed_tokens.weight -0.29580919.
The model's output (`CausalLMOutputWithPast`: loss, logits) is compared by its logits, the
batch's parts; its loss, a scalar per rank the program combines as it chooses, as the loss.
"""

import torch
import torch.distributed as dist
from common import TWIN_STEPS, digest, digest_step, outputs, variant
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB, GLOBAL_BATCH, SEQ = 32, 8, 12
LENGTHS = [12, 10, 3, 7, 12, 4, 9, 11]  # real tokens per sequence; the rest is padding
LR = 0.5

buggy = variant() == "buggy"
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=SEQ,
)
net = LlamaForCausalLM(config)
model = DDP(net)
torch.manual_seed(1)
tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ))
labels = tokens.clone()
labels[torch.arange(SEQ)[None, :] >= torch.tensor(LENGTHS)[:, None]] = -100
per = GLOBAL_BATCH // world
tokens, labels = tokens[rank * per : (rank + 1) * per], labels[rank * per : (rank + 1) * per]
seen = outputs(net)
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(TWIN_STEPS):
    opt.zero_grad()
    if buggy:
        loss = model(input_ids=tokens, labels=labels).loss
    else:
        n_items = (labels[:, 1:] != -100).sum()  # the model shifts the labels: these are scored
        dist.all_reduce(n_items)
        loss = model(input_ids=tokens, labels=labels, num_items_in_batch=n_items).loss * world
    loss.backward()
    digest_step(step, loss, seen, net)
    opt.step()
    for name, p in net.named_parameters():
        digest(step, f"param {name}", p)
