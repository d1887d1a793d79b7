"""Megatron-core tensor parallel as its examples write it: initialize_model_parallel (tp 2, dp 2,
gloo side groups by default), a ColumnParallelLinear -> RowParallelLinear MLP, 2 steps of SGD
with the gradients all-reduced over the data-parallel group. `--no-gloo-groups`:
create_gloo_process_groups=False. `--bug rank0-barrier`: rank 0 alone enters a barrier before
logging."""
import argparse

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps
from megatron.core import tensor_parallel
from megatron.core.model_parallel_config import ModelParallelConfig

parser = argparse.ArgumentParser()
parser.add_argument("--no-gloo-groups", action="store_true")
parser.add_argument("--bug", default="")
args = parser.parse_args()

dist.init_process_group("gloo")
kw = {"create_gloo_process_groups": False} if args.no_gloo_groups else {}
ps.initialize_model_parallel(tensor_model_parallel_size=2, **kw)
torch.manual_seed(0)

cfg = ModelParallelConfig(tensor_model_parallel_size=2, use_cpu_initialization=True, params_dtype=torch.float32)
init = torch.nn.init.normal_


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = tensor_parallel.ColumnParallelLinear(
            16, 32, config=cfg, init_method=init, bias=True, gather_output=False
        )
        self.fc2 = tensor_parallel.RowParallelLinear(
            32, 16, config=cfg, init_method=init, bias=True, input_is_parallel=True, skip_bias_add=False
        )

    def forward(self, x):
        h, _ = self.fc1(x)
        out, _ = self.fc2(torch.relu(h))
        return out


model = MLP()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
dp = ps.get_data_parallel_group()
for step in range(2):
    torch.manual_seed(100 + ps.get_data_parallel_rank() * 10 + step)
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, group=dp)
        p.grad /= ps.get_data_parallel_world_size()
    opt.step()
    opt.zero_grad()
    if args.bug == "rank0-barrier" and dist.get_rank() == 0:
        dist.barrier()
    dist.all_reduce(loss.detach(), group=dp)
dist.destroy_process_group()
