"""Lightning Fabric DDP as its docs write it: Fabric(accelerator="cpu", strategy="ddp") under
torchrun, fabric.setup / setup_dataloaders, 2 steps of fabric.backward, the loss all-reduced
(mean) for the log. `--bug rank0-barrier`: rank 0 alone waits in fabric.barrier() before
saving."""
import argparse

import lightning as L
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="")
args = parser.parse_args()

fabric = L.Fabric(accelerator="cpu", strategy="ddp", devices=4)
fabric.launch()
fabric.seed_everything(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt = fabric.setup(model, opt)
data = torch.utils.data.TensorDataset(torch.randn(64, 16, generator=torch.Generator().manual_seed(0)))
loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=4))
for step, (x,) in zip(range(2), loader):
    loss = model(x).pow(2).mean()
    fabric.backward(loss)
    opt.step()
    opt.zero_grad()
    mean_loss = fabric.all_reduce(loss.detach(), reduce_op="mean")
    fabric.print(f"step {step} loss {mean_loss.item():.4f}")
    if args.bug == "rank0-barrier" and fabric.global_rank == 0:
        fabric.barrier()
fabric.barrier()
