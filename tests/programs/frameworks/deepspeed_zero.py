"""DeepSpeed ZeRO as its tutorials write it: deepspeed.initialize on a small MLP with a client
AdamW, fp32, 2 steps of engine.backward / engine.step on gloo (DS_ACCELERATOR=cpu).
`--stage 1|2|3`. `--bug bf16-rank`: rank 3 casts its model to bfloat16 (a rank whose config
differs). `--bug rank0-gather`: rank 0 alone gathers the loss for a log line."""
import argparse

import deepspeed
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--stage", type=int, default=1)
parser.add_argument("--bug", default="")
args = parser.parse_args()

deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
if args.bug == "bf16-rank" and dist.get_rank() == 3:
    model = model.to(torch.bfloat16)
config = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": args.stage, "reduce_bucket_size": 256, "allgather_bucket_size": 256},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 100,
}
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
dtype = next(engine.module.parameters()).dtype
for step in range(2):
    torch.manual_seed(100 + dist.get_rank() * 10 + step)
    x = torch.randn(2, 16, dtype=dtype)
    loss = engine(x).float().pow(2).mean()
    engine.backward(loss)
    engine.step()
    if args.bug == "rank0-gather" and dist.get_rank() == 0:
        losses = [torch.zeros(1) for _ in range(dist.get_world_size())]
        dist.all_gather(losses, loss.detach().reshape(1))
dist.barrier()
