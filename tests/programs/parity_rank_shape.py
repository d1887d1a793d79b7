"""#31: the rank flowing into a shape, a tensor value and a slice (uneven per-rank batches):
local mode carries each rank's own int, as each rank's process has it."""
import torch
import torch.distributed as dist

from parity_dump import dump

dist.init_process_group("gloo")
world = dist.get_world_size()
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
x = torch.randn(rank + 2, 4)                  # rank r: r + 2 rows
offset = torch.arange(4.0) + rank * 4         # a value
rows = torch.arange(16.0)[rank * 4:(rank + 1) * 4]  # a slice
loss = (model(x).sum() + (offset * rows).sum()) / (rank + 1)
loss.backward()
for p in model.parameters():
    dist.all_reduce(p.grad)
dump("x", x)
dump("offset", offset)
dump("rows", rows)
dump("loss", loss)
dump("weight_grad", model.weight.grad)
