"""Lightning Fabric's ModelParallelStrategy (FSDP2 x TP) as its docs write it: a parallelize_fn
that applies tensor parallel over the "tensor_parallel" mesh dim and fully_shard over
"data_parallel", dp 2 x tp 2 on CPU, 2 steps. `--bug bf16-rank`: rank 3 reduces its loss in
bfloat16 for the log."""
import argparse

import lightning as L
import torch
from lightning.fabric.strategies import ModelParallelStrategy
from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="")
args = parser.parse_args()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def parallelize(model, device_mesh):
    parallelize_module(model, device_mesh["tensor_parallel"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    fully_shard(model, mesh=device_mesh["data_parallel"])
    return model


strategy = ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=2, tensor_parallel_size=2)
fabric = L.Fabric(accelerator="cpu", devices=4, strategy=strategy)
fabric.launch()
fabric.seed_everything(0)
with fabric.init_module():
    model = MLP()
model = fabric.setup(model)
opt = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.01))
for step in range(2):
    torch.manual_seed(100 + step)
    x = torch.randn(4, 16)
    loss = model(x).pow(2).mean()
    fabric.backward(loss)
    opt.step()
    opt.zero_grad()
    logged = loss.detach().to(torch.bfloat16 if args.bug == "bf16-rank" and fabric.global_rank == 3 else torch.float32)
    fabric.all_reduce(logged, reduce_op="sum")
fabric.barrier()
