"""Megatron-core tensor parallel (tp 2 x dp, its ColumnParallelLinear -> RowParallelLinear MLP as
its examples write it) trained by a hand-written loop that all-reduces the gradients over the
data-parallel group itself; world 1 is the same program at tp 1, dp 1 (the single-process run).
Every rank draws the global batch of 16 with one seed and keeps its data-parallel slice.

buggy: the loop reduces a hand-kept list of parameters that misses the RowParallelLinear's bias
(added to the model later): fc2.bias's gradient stays each dp replica's own, the replicas drift
apart and the model leaves world 1 from step 0's backward. healthy: every parameter reduced.

Real gloo (`NUMERICS_PRINT=1 torchrun --nproc-per-node N megatron_dp_grads.py VARIANT`, CPU,
torch 2.13, megatron-core 0.19.2, float32):
  world 1 (both variants alike): loss 29.0658684, 28.5301247, 26.006815 at steps 0-2; fc2.bias
  sum after each step 0.0512827933, 0.0474030934, 0.166408449.
  healthy, world 4: the dp ranks' losses at step 0 33.5519066 and 24.5798264 (mean 29.0658665);
  fc2.bias 0.0512827933, 0.0474030972, 0.166408464 on every rank.
  buggy, world 4: step 0's losses equal; fc2.bias after step 0 0.134352371 on dp rank 0 (ranks
  0-1) and -0.0317867696 on dp rank 1 (ranks 2-3) against 0.0512827933; step 1's losses
  23.7594185 and 33.3228302 (healthy 23.7457256, 33.3145294).
"""

import os
import sys

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps
from megatron.core import tensor_parallel
from megatron.core.model_parallel_config import ModelParallelConfig

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "buggy"
BATCH, STEPS = 16, 3

dist.init_process_group("gloo")
tp = min(2, dist.get_world_size())
ps.initialize_model_parallel(tensor_model_parallel_size=tp)
cfg = ModelParallelConfig(tensor_model_parallel_size=tp, use_cpu_initialization=True, params_dtype=torch.float32)
torch.manual_seed(0)  # the master weights Megatron splits over tp: the same on every rank


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        init = torch.nn.init.normal_
        self.fc1 = tensor_parallel.ColumnParallelLinear(16, 32, config=cfg, init_method=init, gather_output=False)
        self.fc2 = tensor_parallel.RowParallelLinear(
            32, 4, config=cfg, init_method=init, bias=True, input_is_parallel=True, skip_bias_add=False
        )

    def forward(self, x):
        h, _ = self.fc1(x)
        out, _ = self.fc2(torch.tanh(h))
        return out


model = MLP()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
dp, dp_rank, dp_size = ps.get_data_parallel_group(), ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
reduced = list(model.parameters())
if VARIANT == "buggy":
    reduced = [model.fc1.weight, model.fc1.bias, model.fc2.weight]  # fc2.bias forgotten
b = BATCH // dp_size
for step in range(STEPS):
    torch.manual_seed(100 + step)
    x, y = torch.randn(BATCH, 16), torch.randn(BATCH, 4)
    x, y = x[dp_rank * b : (dp_rank + 1) * b], y[dp_rank * b : (dp_rank + 1) * b]
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    for p in reduced:
        dist.all_reduce(p.grad, group=dp)
        p.grad /= dp_size
    opt.step()
    opt.zero_grad()
    if os.environ.get("NUMERICS_PRINT"):
        print(f"rank {dist.get_rank()} step {step} loss {loss.item():.9g} fc2.bias {model.fc2.bias.sum().item():.9g}")
dist.destroy_process_group()
