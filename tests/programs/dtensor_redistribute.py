"""DTensor redistributions as users spell them, on a 1-D mesh of 4 and a 2 x 2 mesh.

1-D (8 x 8 tensor, 4 ranks): Shard(0) -> Replicate (all_gather_into_tensor [2, 8] -> [8, 8]),
Shard(0) -> Shard(1) (all_to_all_single), Replicate -> Shard(1) (local chunk: no comm),
Partial -> Replicate (all_reduce [8, 8]), Partial -> Shard(0) (reduce_scatter_tensor [8, 8] -> [2, 8]).
2-D (dp x tp): [Shard(0), Shard(1)] -> [Replicate, Replicate]: an all-gather on tp, then on dp.
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
torch.manual_seed(0)
full = torch.randn(8, 8)
x = distribute_tensor(full, mesh, [Shard(0)])
assert x.redistribute(mesh, [Replicate()]).to_local().shape == (8, 8)
assert x.redistribute(mesh, [Shard(1)]).to_local().shape == (8, 2)
r = distribute_tensor(full, mesh, [Replicate()])
assert r.redistribute(mesh, [Shard(1)]).to_local().shape == (8, 2)
p = DTensor.from_local(torch.ones(8, 8), mesh, [Partial()])
assert p.redistribute(mesh, [Replicate()]).to_local().shape == (8, 8)
assert p.redistribute(mesh, [Shard(0)]).to_local().shape == (2, 8)

mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
y = distribute_tensor(full, mesh2, [Shard(0), Shard(1)])
assert y.redistribute(mesh2, [Replicate(), Replicate()]).to_local().shape == (8, 8)
