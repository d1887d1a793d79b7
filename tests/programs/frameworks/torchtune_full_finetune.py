"""torchtune's full_finetune_distributed recipe, its distributed building blocks as the recipe
calls them: a tiny llama2 from torchtune.models, training.shard_model (FSDP2 per decoder layer
and the root), the token count all-reduced and the gradients scaled by world / tokens, the
running loss reduced for the log, 2 steps. `--bug rank0-loss-reduce`: only rank 0 reduces the
loss for the log."""
import argparse

import torch
import torch.distributed as dist
from torchtune import training
from torchtune.models.llama2 import llama2
from torchtune.modules import TransformerSelfAttentionLayer

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
world_size, rank = training.get_world_size_and_rank()
training.set_seed(0)
with torch.device("cpu"):
    model = llama2(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=4, embed_dim=32, max_seq_len=16)
training.shard_model(
    model, shard_conditions=[lambda name, module: isinstance(module, TransformerSelfAttentionLayer)],
    cpu_offload=False, reshard_after_forward=True,
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction="sum")
for step in range(2):
    g = torch.Generator().manual_seed(100 + rank * 10 + step)
    tokens = torch.randint(0, 64, (2, 16), generator=g)
    labels = torch.roll(tokens, -1, 1)
    labels[:, -1] = -100
    num_tokens = (labels != -100).sum()
    logits = model(tokens)
    loss = loss_fn(logits.reshape(-1, 64), labels.reshape(-1))
    loss.backward()
    dist.all_reduce(num_tokens)
    training.scale_grads(model, torch.tensor(world_size / num_tokens))
    opt.step()
    opt.zero_grad()
    running = loss.detach() / num_tokens
    if args.bug != "rank0-loss-reduce" or rank == 0:
        dist.all_reduce(running)
dist.destroy_process_group()
