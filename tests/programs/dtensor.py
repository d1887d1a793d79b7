"""distribute_tensor + redistribute Shard(0) -> Replicate on a 1-D mesh of 4."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
x = distribute_tensor(torch.randn(8, 6), mesh, [Shard(0)])
y = x.redistribute(mesh, [Replicate()])
assert y.to_local().shape == (8, 6)
