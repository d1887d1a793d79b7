import torch
import torch.distributed as dist
import torch.nn as nn

from ddptrain.parallelize import parallelize


def log_loss(loss: torch.Tensor) -> None:
    dist.all_reduce(loss.detach().clone(), op=dist.ReduceOp.AVG)


def main(steps: int = 2) -> None:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.manual_seed(0)
    model = parallelize(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        log_loss(loss)
        opt.step()
        opt.zero_grad()
