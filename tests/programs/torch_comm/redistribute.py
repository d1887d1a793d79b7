"""PyTorch's test/distributed/tensor/test_redistribute.py (RedistributeTest, world 4), one window
per case. `window()` steps an empty optimizer (commtrace's `step` column, the ground truth's
window in bench/torch_comm_truth.py): case k's set-up is step 2k, what the peer test runs under
CommDebugMode is step 2k + 1.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DeviceMesh, DTensor, Partial, Replicate, Shard, distribute_tensor

_marker = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.0)


def window():
    _marker.step()


dist.init_process_group("gloo")
world = dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)

# case 0 (test_shard_to_replicate_forward_backward): an uneven Shard(0) -> Replicate: all_gather
# forward, nothing backward (the gradient goes back as a shard)
expected = torch.randn(world * 3 + 1, 3, requires_grad=True)
dtensor = distribute_tensor(expected, mesh, [Shard(0)])
window()
reshard = dtensor.redistribute(mesh, [Replicate()])
reshard.backward(torch.ones_like(reshard))
window()

# case 1 (test_replicate_to_shard_forward_backward): Replicate -> Shard(1): a local chunk forward,
# all_gather backward (the gradient goes back replicated)
replica = torch.randn(3, world * 3 + 2, requires_grad=True)
replica_tensor = distribute_tensor(replica, mesh, [Replicate()])
window()
reshard = replica_tensor.redistribute(mesh, [Shard(1)])
reshard.backward(torch.ones_like(reshard))
window()

# case 2 (test_partial_to_replicate_forward_backward): Partial -> Replicate: all_reduce forward,
# nothing backward
partial_local = torch.ones(12, 3, requires_grad=True)
partial_tensor = DTensor.from_local(partial_local, mesh, [Partial()])
window()
replicated = partial_tensor.redistribute(mesh, [Replicate()])
replicated.backward(torch.ones_like(replicated))
window()

# case 3 (test_replicate_to_local_partial_grad): to_local(grad_placements=[Partial()]): the
# gradient is reduced backward, one all_reduce
local_tensor = torch.randn(12, 3, requires_grad=True)
replica_tensor = distribute_tensor(local_tensor, mesh, [Replicate()])
window()
out = replica_tensor.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])
out.backward(torch.ones_like(out))
window()

# case 4 (test_partial_to_shard): an uneven Partial -> Shard(0): reduce_scatter
partial_tensor = DTensor.from_local(torch.ones(world * 3 + 1, 3), mesh, [Partial()], run_check=False)
window()
scattered = partial_tensor.redistribute(mesh, [Shard(0)])
window()

# case 5 (test_redistribute_shard_dim_change, 1-D): Shard(0) -> Shard(1) of an 8 x 8 tensor. On a
# CPU mesh torch gathers and chunks (an all_gather); under LocalTensorMode it runs its all-to-all
sharded = distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)])
window()
moved = sharded.redistribute(mesh, [Shard(1)])
window()
assert moved.to_local().shape == (8, 8 // world)

# cases 6, 7, 8 (the same test, 2-D mesh 2 x 2): [S0, S1] -> [S0, S0], [S0, S1] -> [S1, S0],
# [S0, S0] -> [S1, S1] of an 8 x 8 tensor: 1, 2 and 2 collectives
mesh_2d = DeviceMesh("cpu", torch.arange(world).reshape(2, world // 2))
for src, dst in (
    ([Shard(0), Shard(1)], [Shard(0), Shard(0)]),
    ([Shard(0), Shard(1)], [Shard(1), Shard(0)]),
    ([Shard(0), Shard(0)], [Shard(1), Shard(1)]),
):
    sharded = distribute_tensor(torch.randn(8, 8), mesh_2d, src)
    window()
    out_dt = sharded.redistribute(mesh_2d, dst)
    window()
    assert list(out_dt.placements) == dst

# case 9 (test_one_chunk_mesh): a 4 x 1 mesh, [Shard(0), Partial()] -> [Shard(0), Replicate()]:
# the size-1 dim needs no collective
mesh_41 = init_device_mesh("cpu", (world, 1))
dt = DTensor.from_local(torch.randn(16, 8), mesh_41, [Shard(0), Partial()])
window()
out = dt.redistribute(mesh_41, [Shard(0), Replicate()])
window()
