"""#31: a per-rank data seed, torch.manual_seed(seed + dist.get_rank()): every rank draws its own
batch (local mode carries the per-rank seed); the model, seeded the same, is the same on all."""
import torch
import torch.distributed as dist

from parity_dump import dump

dist.init_process_group("gloo")
world = dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
seed = 1000
torch.manual_seed(seed + dist.get_rank())
x = torch.randn(8, 4)
mask = torch.nn.functional.dropout(torch.ones(8, 1), 0.5)
loss = (model(x) * mask).pow(2).mean()
loss.backward()
for p in model.parameters():
    dist.all_reduce(p.grad)
    p.grad /= world
dump("x", x)
dump("mask", mask)
dump("loss", loss)
dump("weight_grad", model.weight.grad)
