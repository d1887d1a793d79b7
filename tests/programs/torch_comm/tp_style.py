"""PyTorch's test/distributed/tensor/parallel/test_tp_style.py, one window per case (world 4).

`window()` (a step of an empty optimizer, which moves commtrace's `step` column and the ground
truth's window, bench/torch_comm_truth.py) opens and closes the code the peer test runs under
CommDebugMode: case k's set-up is step 2k, its measured window step 2k + 1.
"""
from copy import deepcopy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, parallelize_module,
)

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)
model = nn.Linear(16, 16)

# case 0 (test_colwise_parallel_style): ColwiseParallel(): nothing forward, all_reduce backward
tensor = torch.rand(8, 16, requires_grad=True)
colwise = parallelize_module(deepcopy(model), mesh, ColwiseParallel())
window()
out = colwise(tensor)
out.sum().backward()
window()

# case 1 (same test): ColwiseParallel(input_layouts=Shard(0)): all_gather forward, reduce_scatter backward
colwise = parallelize_module(deepcopy(model), mesh, ColwiseParallel(input_layouts=Shard(0)))
window()
out = colwise(tensor)
out.sum().backward()
window()

# case 2 (test_rowwise_parallel_style): RowwiseParallel(): all_reduce forward (its output hook)
tensor = torch.rand(8, 16 // world, requires_grad=True)
rowwise = parallelize_module(deepcopy(model), mesh, RowwiseParallel())
window()
out = rowwise(tensor)
out.sum().backward()
window()

# case 3 (same test): RowwiseParallel(output_layouts=Shard(0)): reduce_scatter forward, all_gather backward
rowwise = parallelize_module(deepcopy(model), mesh, RowwiseParallel(output_layouts=Shard(0)))
window()
out = rowwise(tensor)
out.sum().backward()
window()

# case 4 (test_rowwise_parallel_embedding): RowwiseParallel(input_layouts=Replicate()) Embedding:
# all_reduce forward
embedding = nn.Embedding(16, 16)
rowwise = parallelize_module(deepcopy(embedding), mesh, RowwiseParallel(input_layouts=Replicate()))
window()
out = rowwise(torch.arange(8).reshape(4, 2))
out.sum().backward()
window()

# case 5 (same test): output_layouts=Shard(1): reduce_scatter forward, all_gather backward
rowwise = parallelize_module(
    deepcopy(embedding), mesh, RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
)
window()
out = rowwise(torch.arange(8))
out.sum().backward()
window()


class TestKwargModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, *, y, z=2):
        return self.linear(x) + y + z


# case 6 (test_prepare_module_kwargs_input): a keyword input Shard(0) -> Replicate: one all_gather
kwarg_mod = TestKwargModule()
parallelize_module(kwarg_mod.linear, mesh, ColwiseParallel(use_local_output=False))
parallelize_module(kwarg_mod, mesh, PrepareModuleInput(
    input_kwarg_layouts={"y": Shard(0)}, desired_input_kwarg_layouts={"y": Replicate()},
))
x = torch.randn(world, 8)
window()
out = kwarg_mod(x, y=torch.ones(1, 8))
window()
assert out.shape == (world, 8)

# case 7 (test_sequence_parallel_style): SequenceParallel LayerNorm, sequence-sharded input: no comm
torch.distributed.tensor._random.manual_seed(0, mesh)
global_input = torch.rand(20, 8 * world, 12, requires_grad=True)
sharded_input = distribute_tensor(global_input, mesh, [Shard(1)])
sp_norm = parallelize_module(nn.LayerNorm(12), mesh, SequenceParallel())
window()
sharded_out = sp_norm(sharded_input)
sharded_out.backward(torch.ones_like(sharded_out))
window()
assert isinstance(sharded_out, DTensor) and sharded_out.placements == (Shard(1),)
