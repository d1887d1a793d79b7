"""PyTorch's test/distributed/tensor/debug/test_comm_mode.py (world 2, as the test), one window
per case. `window()` steps an empty optimizer (commtrace's `step` column, the ground truth's
window in bench/torch_comm_truth.py). Steps 1, 3, 5: the functional / DTensor cases (set-up in
the even steps before them); steps 6 to 18: one c10d op each (test_comm_mode_with_c10d; its
gather and scatter, whose arguments differ on the root, are comm_mode_rooted.py).
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.distributed.tensor import DeviceMesh, DTensor, Shard
from torch.distributed.tensor._redistribute import use_min_cost_redistribution_plan
from torch.testing._internal.distributed._tensor.common_dtensor import MLPModule

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
world_pg = dist.distributed_c10d._get_default_group()


class WrapperModel(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.model = MLPModule(device=device)

    def forward(self, x):
        x = funcol.all_gather_single(x, 0, world_pg)
        x = funcol.reduce_scatter_single(x, "sum", 0, world_pg)
        out = self.model(x)
        return funcol.all_reduce(out, "sum", world_pg)


class WrapperModelCoalesced(WrapperModel):
    def forward(self, x):
        x = funcol.all_gather_single(x, 0, world_pg)
        x = funcol.reduce_scatter_single(x, "sum", 0, world_pg)
        out = self.model(x)
        return funcol.all_reduce_coalesced([out], "sum", world_pg)


# case 0 (test_comm_mode): all_gather, reduce_scatter, all_reduce, functional
model = WrapperModel("cpu")
window()
model(torch.randn(20, 10))
window()

# case 1 (test_comm_mode_coalesced): the same with all_reduce_coalesced
model = WrapperModelCoalesced("cpu")
window()
model(torch.randn(20, 10))
window()

# case 2 (test_comm_mode_with_dtensor): mm of two Shard(0) DTensors, min-cost plan: one all_gather
mesh = DeviceMesh("cpu", list(range(world)))
x_dtensor = DTensor.from_local(torch.randn(4, 8, requires_grad=True), mesh, [Shard(0)], run_check=False)
y_dtensor = DTensor.from_local(torch.randn(4, 32, requires_grad=True), mesh, [Shard(0)], run_check=False)
window()
with use_min_cost_redistribution_plan():
    torch.mm(x_dtensor, y_dtensor)
window()

# cases 3 to 15 (test_comm_mode_with_c10d): one c10d op per window, each counted once by its c10d
# name; arguments as a cluster takes them (lists of world tensors)
inp = torch.rand(world, 8, 16)
all_gather_out = inp.new_empty(world * world, 8, 16)
dist.all_reduce(inp)
window()
dist.all_gather_into_tensor(all_gather_out, inp)
window()
dist.reduce_scatter_tensor(inp, all_gather_out)
window()
dist.broadcast(inp, 0)
window()
dist.reduce(inp, 0)
window()
dist.all_gather([torch.empty_like(inp) for _ in range(world)], inp)
window()
dist.all_gather_coalesced([[torch.empty_like(inp)] for _ in range(world)], [inp])
window()
with dist._coalescing_manager():
    dist.all_gather_into_tensor(all_gather_out, inp)
window()
dist.all_reduce_coalesced(inp)
window()
dist.reduce_scatter(inp, [inp.clone() for _ in range(world)])
window()
with dist._coalescing_manager():
    dist.reduce_scatter_tensor(inp, all_gather_out)
window()
dist.all_to_all([torch.empty_like(inp) for _ in range(world)], [inp.clone() for _ in range(world)])
window()
dist.all_to_all_single(torch.empty_like(inp), inp)
window()
