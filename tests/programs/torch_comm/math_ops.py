"""PyTorch's test/distributed/tensor/test_math_ops.py (DistMathOpsTest, world 4), one window per
case. `window()` steps an empty optimizer (commtrace's `step` column, the ground truth's window
in bench/torch_comm_truth.py): case k's set-up is step 2k, what the peer test runs under
CommDebugMode is step 2k + 1.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_module, distribute_tensor

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


def _replicate_fn(name, module, device_mesh):
    for name, param in module.named_parameters():
        if name in ["weight", "bias"]:
            module.register_parameter(name, nn.Parameter(distribute_tensor(param, device_mesh, [Replicate()])))


dist.init_process_group("gloo")
world = dist.get_world_size()
device_mesh = DeviceMesh("cpu", list(range(world)))
torch.manual_seed(0)

# cases 0, 1 (test_layer_norm_bwd): LayerNorm over the last two dims (norm_idx 1), affine. Sharded
# on dim 2 (inside the normalized shape): one collective forward, one backward; on dim 0: none
for shard_dim in (2, 0):
    x = torch.rand(20, 5, 10, requires_grad=True)
    layer_norm_dist = distribute_module(nn.LayerNorm(x.shape[1:], elementwise_affine=True), device_mesh, _replicate_fn)
    x_dist = distribute_tensor(x, device_mesh, [Shard(shard_dim)])
    window()
    y_dist = layer_norm_dist(x_dist)
    y_dist.sum().backward()
    window()

# case 2 (test_nll_loss_and_cross_entropy): cross_entropy of a class-sharded input, replicated
# target, reduction "mean": one all_gather forward
x = torch.rand(8, 16, requires_grad=True)
dist_target = distribute_tensor(torch.randint(16, (8,)), device_mesh, [Replicate()])
dist_x = distribute_tensor(x, device_mesh, [Shard(1)])
window()
dist_y = torch.nn.functional.cross_entropy(dist_x, dist_target, reduction="mean")
dist_y.backward()
window()
assert dist_y.placements[0].is_replicate()
