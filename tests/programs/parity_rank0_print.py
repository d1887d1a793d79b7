"""#31: rank-0 logging through every kind of rank read (dist.get_rank(), $RANK, a flag kept in a
variable, a helper given the rank, a progress value made and updated on rank 0 only) runs under
local mode; the per-rank values are a real run's."""
import os

import torch
import torch.distributed as dist

from parity_dump import dump


def log(rank, msg):
    if rank == 0:
        print(msg, flush=True)


dist.init_process_group("gloo")
world = dist.get_world_size()
rank = int(os.environ["RANK"])
is_main = dist.get_rank() == 0
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(100 + rank)
if dist.get_rank() == 0:
    print(f"training on {world} ranks", flush=True)
if os.environ["RANK"] == "0":
    seen = []
for step in range(3):
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    if is_main and step % 2 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    if os.environ["RANK"] == "0":
        seen.append(loss.item())
    log(rank, f"rank {rank} done step {step}")
    dump(f"loss{step}", loss)
dump("weight", model.weight)
dump("weight_grad", model.weight.grad)
