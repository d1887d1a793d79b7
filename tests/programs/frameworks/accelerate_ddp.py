"""Accelerate as its examples write it: Accelerator(cpu=True) under torchrun (MULTI_CPU on gloo),
prepare() wraps the model in DDP, 2 steps of accelerator.backward, and the loss gathered for
the log on every rank. `--bug rank0-gather`: the gather sits under `is_main_process`."""
import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="")
args = parser.parse_args()

accelerator = Accelerator(cpu=True)
set_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt = accelerator.prepare(model, opt)
for step in range(2):
    torch.manual_seed(100 + accelerator.process_index * 10 + step)
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    main_only = args.bug == "rank0-gather"
    if not main_only or accelerator.is_main_process:
        losses = accelerator.gather(loss.detach())
        accelerator.print(f"step {step} loss {losses.mean().item():.4f}")
accelerator.wait_for_everyone()
